"""requirements-device.txt (what device_check.sh carries to a CUDA machine that
cannot fetch) stays at the pins and hashes of requirements.txt, and carries
every package transformers, tokenizers and huggingface-hub need at runtime but
the few a python3 with torch brings itself."""
import os
import re
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HF = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The device machine's own: numpy must match its torch; typer and click are
# imported by the transformers and hf CLIs only.
NOT_CARRIED = {"numpy", "typer", "click", "torch"}
# The device's python3 (the wheels are fetched for it).
DEVICE_ENV = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}


def pins(path):
    """{name: (version, {hashes})} of a pip-compile style file."""
    out, cur = {}, None
    for line in open(path):
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            cur = canonicalize_name(m.group(1))
            out[cur] = (m.group(2), set())
            continue
        h = re.match(r"^\s+--hash=(\S+)", line)
        if h and cur:
            out[cur][1].add(h.group(1).rstrip("\\").strip())
        elif not line.startswith(" "):
            cur = None
    return out


def test_device_pins_are_the_envs():
    device, env = pins(os.path.join(HF, "requirements-device.txt")), pins(os.path.join(HF, "requirements.txt"))
    assert {"transformers", "tokenizers", "huggingface-hub"} <= device.keys()
    for name, (version, hashes) in device.items():
        assert name in env, f"requirements-device.txt: {name} is not in requirements.txt"
        assert version == env[name][0], f"requirements-device.txt: {name}=={version}, requirements.txt pins {env[name][0]}"
        assert hashes and hashes == env[name][1], f"requirements-device.txt: {name}'s hashes differ from requirements.txt's"


def test_device_wheels_cover_what_transformers_imports():
    device = pins(os.path.join(HF, "requirements-device.txt"))
    todo, seen, missing = ["transformers", "tokenizers", "huggingface-hub"], set(), []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for spec in metadata.requires(name) or []:
            r = Requirement(spec)
            if r.marker and not r.marker.evaluate(DEVICE_ENV):
                continue
            dep = canonicalize_name(r.name)
            if dep in NOT_CARRIED:
                continue
            if dep not in device:
                missing.append(f"{dep} (for {name})")
            todo.append(dep)
    assert not missing, "requirements-device.txt lacks " + ", ".join(sorted(missing))
