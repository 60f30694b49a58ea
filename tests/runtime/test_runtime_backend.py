"""Backend choice (ISAGEN_BACKEND, then torch's ROCm detection, else the emulator) under a
monkeypatched torch, and the default build target."""

from __future__ import annotations

import types

import pytest
import torch

from isagen.errors import LaunchError
from isagen.runtime import backends, gpu
from isagen.runtime.backends.hip import HipBackend


def fake_rocm(monkeypatch, *, hip="6.4.43482", available=True, count=1, arch="gfx942:sramecc+:xnack-"):
    """Make torch look like a ROCm build with one GPU of ``arch`` (or none)."""
    monkeypatch.setattr(torch.version, "hip", hip, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(gcnArchName=arch))


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv("ISAGEN_BACKEND", raising=False)


def test_this_machine_uses_the_emulator():
    assert torch.version.hip is None
    ok, why = gpu.rocm_gpu_available()
    assert not ok and "not a ROCm build" in why
    assert backends.choose_backend() == "emu"
    assert gpu.default_target() == "gfx942"


@pytest.mark.parametrize("arch", ["gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-", "gfx942"])
def test_supported_rocm_gpu_picks_hip(monkeypatch, arch):
    fake_rocm(monkeypatch, arch=arch)
    assert gpu.rocm_gpu_available() == (True, "")
    assert backends.choose_backend() == "hip"
    assert gpu.default_target() == arch.split(":")[0]


def test_unsupported_or_missing_gpu_falls_back_to_emu(monkeypatch):
    fake_rocm(monkeypatch, arch="gfx90a:sramecc+:xnack-")
    ok, why = gpu.rocm_gpu_available()
    assert not ok and "gfx90a" in why
    assert backends.choose_backend() == "emu"
    assert gpu.default_target() == "gfx942"
    fake_rocm(monkeypatch, available=False)
    assert backends.choose_backend() == "emu" and "no ROCm GPU" in gpu.rocm_gpu_available()[1]
    fake_rocm(monkeypatch, hip=None)
    assert backends.choose_backend() == "emu"


def test_environment_and_argument_override(monkeypatch):
    fake_rocm(monkeypatch)
    monkeypatch.setenv("ISAGEN_BACKEND", "emu")
    assert backends.choose_backend() == "emu"
    assert backends.choose_backend("hip") == "hip"          # the argument wins over the environment
    monkeypatch.setenv("ISAGEN_BACKEND", "HIP ")
    assert backends.choose_backend() == "hip"
    monkeypatch.setenv("ISAGEN_BACKEND", "cuda")
    with pytest.raises(LaunchError, match=r"unknown backend ISAGEN_BACKEND='cuda' \(choose hip or emu\)"):
        backends.choose_backend()
    with pytest.raises(LaunchError, match=r"unknown backend backend='vulkan'"):
        backends.choose_backend("vulkan")


def test_hip_backend_without_a_gpu_says_why(monkeypatch):
    """Forcing hip here fails at launch with the detection's reason, not with a HIP dlopen trace."""
    be = backends.get_backend("hip")
    assert isinstance(be, HipBackend) and be.name == "hip"
    with pytest.raises(LaunchError, match=r"needs a supported AMD GPU: torch .* is not a ROCm build"):
        be.run(types.SimpleNamespace(), {}, {}, (1, 1, 1), (64, 1, 1))
    assert backends.get_backend("emu").name == "emu"
