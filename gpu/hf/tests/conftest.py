"""gpu/hf's tests: tiny random checkpoints built once per session (tiny.py),
in-process server Engines and Trainers on CPU in float32; nothing downloaded."""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HF = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(HF), "reference"))
sys.path.insert(0, HF)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
from tmpclean import pytest_sessionfinish  # noqa: E402,F401  (gpu/reference: a passing run leaves no tmp_path behind)

# Tiny models: one thread is as fast, and much faster on a shared, loaded CPU.
torch.set_num_threads(int(os.environ.get("T1FLOW_TEST_THREADS", "1")))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """tiny(arch) -> checkpoint directory, built once per arch."""
    import tiny as tiny_mod

    built = {}

    def get(arch):
        if arch not in built:
            built[arch] = tiny_mod.build(arch, str(tmp_path_factory.mktemp(f"tiny-{arch}")), seed=0)
        return built[arch]
    return get


@pytest.fixture(scope="session")
def engines(tiny):
    """engines(arch, **flags) -> a server Engine, one per (arch, flags)."""
    from helpers import make_engine

    made = {}

    def get(arch, **flags):
        key = (arch, tuple(sorted(flags.items())))
        if key not in made:
            made[key] = make_engine(tiny(arch), **flags)
        return made[key]
    return get
