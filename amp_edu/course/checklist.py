"""The course's check cells, as the grader runs them: written by `make exercises` from
solutions/ (amp_edu.course.handout.from_solutions), so a grader installed without a checkout
knows them too. Do not edit: tests/course/test_exercises.py fails when it differs from solutions/."""

CHECKS = {
    'decode': {'lesson': '01_number_formats.ipynb', 'source': '# CHECK: decode\ncheck_decode(decode)', 'module': 'amp_edu.checks.l01', 'function': 'check_decode', 'args': 'decode'},
    'fp16_fate': {'lesson': '01_number_formats.ipynb', 'source': '# CHECK: fp16_fate\ncheck_fp16_fate(fp16_fate)', 'module': 'amp_edu.checks.l01', 'function': 'check_fp16_fate', 'args': 'fp16_fate'},
    'underflow_fraction': {'lesson': '02_where_fp16_breaks.ipynb', 'source': '# CHECK: underflow_fraction\ncheck_underflow_fraction(underflow_fraction)', 'module': 'amp_edu.checks.l02', 'function': 'check_underflow_fraction', 'args': 'underflow_fraction'},
    'lost_updates': {'lesson': '02_where_fp16_breaks.ipynb', 'source': '# CHECK: lost_updates\ncheck_lost_updates(lost_updates)', 'module': 'amp_edu.checks.l02', 'function': 'check_lost_updates', 'args': 'lost_updates'},
    'choose_scale': {'lesson': '03_loss_scaling_by_hand.ipynb', 'source': '# CHECK: choose_scale\ncheck_choose_scale(choose_scale)', 'module': 'amp_edu.checks.l03', 'function': 'check_choose_scale', 'args': 'choose_scale'},
    'scaled_step': {'lesson': '03_loss_scaling_by_hand.ipynb', 'source': '# CHECK: scaled_step\ncheck_scaled_step(scaled_step)', 'module': 'amp_edu.checks.l03', 'function': 'check_scaled_step', 'args': 'scaled_step'},
    'unscale': {'lesson': '04_gradscaler_from_scratch.ipynb', 'source': '# CHECK: unscale\ncheck_unscale(unscale_and_check_)', 'module': 'amp_edu.checks.l04', 'function': 'check_unscale', 'args': 'unscale_and_check_'},
    'update': {'lesson': '04_gradscaler_from_scratch.ipynb', 'source': '# CHECK: update\ncheck_update(update_scale_)', 'module': 'amp_edu.checks.l04', 'function': 'check_update', 'args': 'update_scale_'},
    'is_eligible': {'lesson': '05_autocast_from_scratch.ipynb', 'source': '# CHECK: is_eligible\ncheck_is_eligible(is_eligible)', 'module': 'amp_edu.checks.l05', 'function': 'check_is_eligible', 'args': 'is_eligible'},
    'autocast_args': {'lesson': '05_autocast_from_scratch.ipynb', 'source': '# CHECK: autocast_args\ncheck_autocast_args(autocast_args)', 'module': 'amp_edu.checks.l05', 'function': 'check_autocast_args', 'args': 'autocast_args'},
    'cached_cast': {'lesson': '05_autocast_from_scratch.ipynb', 'source': '# CHECK: cached_cast\ncheck_cached_cast(cached_cast)', 'module': 'amp_edu.checks.l05', 'function': 'check_cached_cast', 'args': 'cached_cast'},
    'arithmetic_intensity': {'lesson': '06_tensor_cores.ipynb', 'source': '# CHECK: arithmetic_intensity\nl06.check_arithmetic_intensity(arithmetic_intensity)', 'module': 'amp_edu.checks.l06', 'function': 'check_arithmetic_intensity', 'args': 'arithmetic_intensity'},
    'predict_bound': {'lesson': '06_tensor_cores.ipynb', 'source': '# CHECK: predict_bound\nl06.check_predict_bound(predict_bound)', 'module': 'amp_edu.checks.l06', 'function': 'check_predict_bound', 'args': 'predict_bound'},
    'predict_saved_bytes': {'lesson': '07_memory.ipynb', 'source': '# CHECK: predict_saved_bytes\nl07.check_predict_saved_bytes(predict_saved_bytes)', 'module': 'amp_edu.checks.l07', 'function': 'check_predict_saved_bytes', 'args': 'predict_saved_bytes'},
    'predict_largest_batch': {'lesson': '07_memory.ipynb', 'source': '# CHECK: predict_largest_batch\nl07.check_predict_largest_batch(predict_largest_batch)', 'module': 'amp_edu.checks.l07', 'function': 'check_predict_largest_batch', 'args': 'predict_largest_batch'},
    'train_amp': {'lesson': '08_amp_training_recipe.ipynb', 'source': '# CHECK: train_amp\ncheck_train_amp(train_amp)', 'module': 'amp_edu.checks.l08', 'function': 'check_train_amp', 'args': 'train_amp'},
    'first_nonfinite_layer': {'lesson': '09_debugging.ipynb', 'source': '# CHECK: first_nonfinite_layer\ncheck_first_nonfinite(first_nonfinite_layer)', 'module': 'amp_edu.checks.l09', 'function': 'check_first_nonfinite', 'args': 'first_nonfinite_layer'},
    'quantize_tensorwise': {'lesson': '10_fp8_training.ipynb', 'source': '# CHECK: quantize_tensorwise\ncheck_quantize_tensorwise(quantize_tensorwise)', 'module': 'amp_edu.checks.l10', 'function': 'check_quantize_tensorwise', 'args': 'quantize_tensorwise'},
    'delayed_update': {'lesson': '10_fp8_training.ipynb', 'source': '# CHECK: delayed_update\ncheck_delayed_update(delayed_update)', 'module': 'amp_edu.checks.l10', 'function': 'check_delayed_update', 'args': 'delayed_update'},
    'unscale_and_sync': {'lesson': '11_distributed_mixed_precision.ipynb', 'source': '# CHECK: unscale_and_sync\ncheck_unscale_and_sync(unscale_and_sync_)', 'module': 'amp_edu.checks.l11', 'function': 'check_unscale_and_sync', 'args': 'unscale_and_sync_'},
    'stochastic_round': {'lesson': '12_optimizer_precision.ipynb', 'source': '# CHECK: stochastic_round\ncheck_stochastic_round(stochastic_round_fp16)', 'module': 'amp_edu.checks.l12', 'function': 'check_stochastic_round', 'args': 'stochastic_round_fp16'},
    'kahan': {'lesson': '12_optimizer_precision.ipynb', 'source': '# CHECK: kahan\ncheck_kahan(init_compensation, kahan_update_)', 'module': 'amp_edu.checks.l12', 'function': 'check_kahan', 'args': 'init_compensation, kahan_update_'},
    'low_precision_ops': {'lesson': '13_compile_and_mixed_precision.ipynb', 'source': '# CHECK: low_precision_ops\nl13.check_low_precision_ops(low_precision_ops)', 'module': 'amp_edu.checks.l13', 'function': 'check_low_precision_ops', 'args': 'low_precision_ops'},
    'kernel_kinds': {'lesson': '13_compile_and_mixed_precision.ipynb', 'source': '# CHECK: kernel_kinds\nl13.check_kernel_kinds(kernel_kinds)', 'module': 'amp_edu.checks.l13', 'function': 'check_kernel_kinds', 'args': 'kernel_kinds'},
    'reproduce_trainer': {'lesson': '14_trainer_and_accelerate.ipynb', 'source': '# CHECK: reproduce_trainer\ncheck_reproduce_trainer(reproduce_trainer)', 'module': 'amp_edu.checks.l14', 'function': 'check_reproduce_trainer', 'args': 'reproduce_trainer'},
    'what_runs': {'lesson': '14_trainer_and_accelerate.ipynb', 'source': '# CHECK: what_runs\ncheck_what_runs(what_runs)', 'module': 'amp_edu.checks.l14', 'function': 'check_what_runs', 'args': 'what_runs'},
}

# the code cells each exercise hands out (handout.cell_digest), checks aside
GIVEN = {
    '01_number_formats.ipynb': ['855f45cdaf2a1cd6', '8f2199d7e0976df6', 'd54baf5e86c01ada'],
    '02_where_fp16_breaks.ipynb': ['0049d0af43b9aecc', 'b0f503b8e5f2ea9a', 'b629bc3ad5400829', 'c265f9e98ca4ed24', 'f19b3b27e076421e'],
    '03_loss_scaling_by_hand.ipynb': ['113bd35b9d97b534', 'b9a191590e27cff7', 'c499da07e29fb870', 'c4fb0a3ad39055c0'],
    '04_gradscaler_from_scratch.ipynb': ['d9c850f908383e22', 'da2cffa232107ba1', 'efefde3a27952a7a'],
    '05_autocast_from_scratch.ipynb': ['6f40204dd3fd42d2', '906a6d35221b8ac8', 'a93cd503c10b933e', 'e1ff49ea8ad274f0'],
    '06_tensor_cores.ipynb': ['0c1726d164941a8a', '3dace15ab55098b4', '9836917cecc4cd46', 'e5e00ae02e8512ae'],
    '07_memory.ipynb': ['29ae25828e8e176d', '3419586d34583cec', '953e64e46a76dc61', 'a15745032430a0a7', 'b3acb2bc94feb990'],
    '08_amp_training_recipe.ipynb': ['7546a5aaa2f1a621', 'd981d25f7453ff31', 'f00e785e0d69d034'],
    '09_debugging.ipynb': ['7bc352ce9238c690', 'da3bd1c727c41721', 'f6ef27fcd6413444'],
    '10_fp8_training.ipynb': ['1b6c9571e3aa61b8', '379937c40a580305', 'efd03996e4bc0c58'],
    '11_distributed_mixed_precision.ipynb': ['24eccc6539d93381', 'be3f96bf96e6eafb', 'e56b3b829bb86b30'],
    '12_optimizer_precision.ipynb': ['3db7b78c9e1e8a1a', 'b72bcf38a16e60f8', 'ea84c68af5108e57'],
    '13_compile_and_mixed_precision.ipynb': ['1ba0b0d01164db40', '6ccd72eea9f0f784', '77f8b7cd44136512', '7928d433b912936b', '90067208395d1414', '996c7dac09133169'],
    '14_trainer_and_accelerate.ipynb': ['1686e809bcfcc9a1', '47048759b242895b', '8181008e3d6ab267', 'fe35c326ded01922'],
}
