"""The course's check cells, as the grader runs them: written by `make exercises` from
solutions/ (amp_edu.course.reference.from_solutions), so a grader installed without a checkout
knows them too. Do not edit: tests/test_course.py fails when it differs from solutions/."""

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
    'stochastic_round': {'lesson': '12_optimizer_precision.ipynb', 'source': '# CHECK: stochastic_round\ncheck_stochastic_round(stochastic_round)', 'module': 'amp_edu.checks.l12', 'function': 'check_stochastic_round', 'args': 'stochastic_round'},
    'kahan': {'lesson': '12_optimizer_precision.ipynb', 'source': '# CHECK: kahan\ncheck_kahan(init_compensation, kahan_update_)', 'module': 'amp_edu.checks.l12', 'function': 'check_kahan', 'args': 'init_compensation, kahan_update_'},
    'low_precision_ops': {'lesson': '13_compile_and_mixed_precision.ipynb', 'source': '# CHECK: low_precision_ops\nl13.check_low_precision_ops(low_precision_ops)', 'module': 'amp_edu.checks.l13', 'function': 'check_low_precision_ops', 'args': 'low_precision_ops'},
    'kernel_kinds': {'lesson': '13_compile_and_mixed_precision.ipynb', 'source': '# CHECK: kernel_kinds\nl13.check_kernel_kinds(kernel_kinds)', 'module': 'amp_edu.checks.l13', 'function': 'check_kernel_kinds', 'args': 'kernel_kinds'},
}
