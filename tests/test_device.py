import pytest
import torch

from amp_edu import device


def test_smoke_flag(monkeypatch):
    for v, want in [("1", True), ("true", True), ("0", False), ("", False), ("no", False)]:
        monkeypatch.setenv("AMP_EDU_SMOKE", v)
        assert device.is_smoke() is want


def test_pick_sizes(monkeypatch):
    monkeypatch.setenv("AMP_EDU_SMOKE", "1")
    assert device.pick(smoke=1, cpu=2, gpu=3) == 1
    monkeypatch.setenv("AMP_EDU_SMOKE", "0")
    want = 3 if torch.cuda.is_available() else 2
    assert device.pick(smoke=1, cpu=2, gpu=3) == want
    assert device.pick(smoke=1, cpu=2, gpu=3, device="cpu") == 2


def test_pick_device_rejects_bad_input():
    with pytest.raises(ValueError, match="'cpu', 'cuda'"):
        device.pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="is_available"):
            device.pick_device("cuda")
    assert device.pick_device("cpu").type == "cpu"


def test_info_and_report_on_cpu():
    i = device.info("cpu")
    assert i.device == "cpu" and i.threads == torch.get_num_threads()
    assert set(i.cpu_flags) >= {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"}
    assert i.cpu_bf16_fast == (i.cpu_flags["avx512_bf16"] or i.cpu_flags["amx_bf16"])
    assert "fast bf16" in device.setup_line("cpu")
    text = device.report("cpu")
    assert "CPU bf16 units" in text and torch.__version__ in text
    with pytest.raises(ValueError):
        device.info("meta")


def test_doctor_cli(capsys):
    from amp_edu.__main__ import main
    assert main(["doctor"]) == 0
    assert "CPU fp16 units" in capsys.readouterr().out


def test_num_threads_restores_the_setting_even_on_error():
    from amp_edu import study
    assert study.num_threads is device.num_threads          # one owner, re-exported for the study
    n = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with device.num_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == n
    with pytest.raises(ValueError, match="threads must be None or a positive int"):
        with device.num_threads(0):
            pass
    for bad in (True, 1.0, "2"):
        with pytest.raises(TypeError, match="threads"):
            with device.num_threads(bad):
                pass
    assert torch.get_num_threads() == n
