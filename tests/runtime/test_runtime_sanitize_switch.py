"""The emulator backend's sanitizer switch (ISAGEN_EMU_SANITIZE): on by default, off on request."""

import pytest
import torch

import isagen
from isagen.errors import LaunchError
from isagen.runtime.backends.emu import EmuBackend, sanitize_enabled


def test_default_is_on_and_the_switch_is_validated(monkeypatch):
    monkeypatch.delenv("ISAGEN_EMU_SANITIZE", raising=False)
    monkeypatch.delenv("ISAGEN_EMU_DEVICE", raising=False)
    assert sanitize_enabled()
    monkeypatch.setenv("ISAGEN_EMU_SANITIZE", "off")
    assert not sanitize_enabled()
    monkeypatch.setenv("ISAGEN_EMU_SANITIZE", "maybe")
    with pytest.raises(LaunchError, match="ISAGEN_EMU_SANITIZE='maybe'"):
        sanitize_enabled()


def test_default_is_off_on_the_cuda_engine_and_asked_for_explicitly(monkeypatch):
    """The sanitizer costs far more on the cuda engine (host-side bookkeeping): unset, the switch is off
    there; set, it is obeyed."""
    monkeypatch.delenv("ISAGEN_EMU_SANITIZE", raising=False)
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cuda")
    assert not sanitize_enabled()
    monkeypatch.setenv("ISAGEN_EMU_SANITIZE", "1")
    assert sanitize_enabled()
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cpu")
    monkeypatch.delenv("ISAGEN_EMU_SANITIZE")
    assert sanitize_enabled()


@pytest.mark.parametrize("setting, expected", [("1", True), ("0", False)])
def test_the_device_used_follows_the_switch(monkeypatch, setting, expected):
    monkeypatch.setenv("ISAGEN_EMU_SANITIZE", setting)
    kernel = isagen.build("axpy_f32", target="gfx942")
    backend = EmuBackend()
    dev, _ = backend._module(kernel)
    assert dev.sanitize is expected
    x, y = torch.randn(300), torch.randn(300)
    ref = 2.0 * x.double() + y.double()
    kernel(x, y, alpha=2.0)                     # the default (emulator) backend, same switch
    assert torch.allclose(y.double(), ref, rtol=1e-6, atol=1e-6)


def test_the_backend_keeps_the_most_recently_used_modules(monkeypatch):
    # a loaded module holds its decoded and compiled code: a process running many kernels keeps only
    # the last MAX_MODULES of them (least recently used out), and a kept one is not reloaded
    from isagen.runtime.backends import emu
    monkeypatch.setattr(emu, "MAX_MODULES", 2)
    kernels = [isagen.build(name, target="gfx942") for name in ("axpy_f32", "scale_f16", "add_bf16")]
    backend = EmuBackend()
    first = backend._module(kernels[0])[1]
    backend._module(kernels[1])
    assert backend._module(kernels[0])[1] is first            # a hit, and now the most recent
    backend._module(kernels[2])                               # evicts kernels[1], the least recent
    assert len(backend._modules) == 2
    assert backend._module(kernels[0])[1] is first
    kept = {key[-1] for key in backend._modules}
    assert emu.hashlib.sha256(kernels[1].code_object).hexdigest() not in kept


def test_the_backend_follows_the_engine_variable(monkeypatch):
    # a Device made under ISAGEN_EMU_DEVICE=cpu is not reused once the variable names cuda: the backend keys
    # its devices (and modules) by the engine; without CuPy the cuda one is refused with the engine's error
    from isagen.runtime.emu import xp as X
    monkeypatch.setenv("ISAGEN_EMU_SANITIZE", "0")        # the same switch on both engines
    kernel = isagen.build("axpy_f32", target="gfx942")
    backend = EmuBackend()
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cpu")
    assert backend._module(kernel)[0].engine == "cpu"
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cuda")
    try:
        X.cupy_module()
    except X.EngineError:
        with pytest.raises(X.EngineError, match="cuda emulator engine"):
            backend._module(kernel)
    else:
        assert backend._module(kernel)[0].engine == "cuda"
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cpu")
    assert backend._module(kernel)[0].engine == "cpu"
