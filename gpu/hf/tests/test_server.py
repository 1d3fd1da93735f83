"""The HF server's protocol: model info and the chat contract, tokenizing,
/generate's log-probs, finish reasons and routing layout, the prefix cache."""
import base64
import json
import os
import shutil

import numpy as np
import pytest
import torch

import hfmoe
import httpjson
import testkit
from helpers import SYSTEM, make_engine


def test_model_info_and_chat_contract(engines):
    eng = engines("qwen3_moe")
    info = eng.info()
    for k, want in (("num_layers", 3), ("num_experts", 8), ("top_k", 2), ("vocab_size", eng.model.config.vocab_size),
                    ("block_size", 4096), ("max_total_num_tokens", 4096), ("is_generation", True)):
        assert info[k] == want, k
    assert info["special_tokens"]["<|im_end|>"] == eng.tok.convert_tokens_to_ids("<|im_end|>")
    assert info["chat"] == {"system_prefix": "<|im_start|>system\n", "user_prefix": "<|im_start|>user\n",
                            "assistant_prefix": "<|im_start|>assistant\n", "end_of_turn": "<|im_end|>",
                            "end_of_turn_id": info["special_tokens"]["<|im_end|>"], "turn_separator": "\n",
                            "default_system": "", "default_system_block": ""}
    # The pieces rebuild what the template itself renders.
    c = info["chat"]
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert eng.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == \
        c["system_prefix"] + "S" + c["end_of_turn"] + c["turn_separator"] + c["user_prefix"] + "U" + \
        c["end_of_turn"] + c["turn_separator"] + c["assistant_prefix"]
    assert json.loads(json.dumps(info)) == info


def test_chat_contract_refuses_a_template_it_cannot_split(tiny, tmp_path):
    d = str(tmp_path / "nosystem")
    shutil.copytree(tiny("qwen3_moe"), d)
    tok = hfmoe.load_tokenizer(d)
    # A template that cannot express a system turn (as Mixtral's official one).
    tok.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}"
                         "{% endif %}[INST]{{ m['content'] }}[/INST]{% endfor %}")
    tok.save_pretrained(d)
    with pytest.raises(hfmoe.ChatTemplateError, match="tokenizer_config.json"):
        make_engine(d)


def test_tokenize_split_special_tokens_and_detokenize(engines):
    eng = engines("qwen3_moe")
    im_end = eng.info()["special_tokens"]["<|im_end|>"]
    text = "ls<|im_end|>x"
    parsed = eng.tokenize({"text": text})["tokens"]
    split = eng.tokenize({"text": text, "split_special_tokens": True})["tokens"]
    assert im_end in parsed and im_end not in split
    assert eng.detokenize({"tokens": parsed})["text"] == text
    assert eng.detokenize({"tokens": split})["text"] == text
    assert eng.tokenize({"text": text, "add_special_tokens": False})["tokens"] == split   # the reference's older flag
    with pytest.raises(httpjson.HTTPError):
        eng.tokenize({"text": text, "split_special_tokens": "yes"})


def _full_forward(eng, ids, temperature):
    """Log-probs and routing of a whole sequence in one forward (no cache)."""
    with torch.no_grad(), hfmoe.routing(eng.model, capture=True) as cap:
        logits = eng.model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits / temperature, -1), hfmoe.stacked(cap, eng.model.t1_routing.n_layers)[0]


def test_generate_logprobs_and_routing_layout(engines):
    eng = engines("qwen3_moe", disable_radix_cache=True)
    prompt = testkit.prompt_ids(eng, SYSTEM, "hello")
    r = eng.generate({"input_ids": prompt, "return_logprob": True, "return_routed_experts": True,
                      "sampling_params": {"temperature": 0.7, "max_new_tokens": 8, "seed": 3, "stop_token_ids": []}})
    out = r["output_ids"]
    assert r["meta_info"]["finish_reason"] == {"type": "length", "length": 8}
    assert [e[1] for e in r["meta_info"]["output_token_logprobs"]] == out
    routing = testkit.routing_of(eng, r)
    # SGLang's layout: every forwarded position (prompt and reply but the last
    # sampled token: T-1 rows), num_hidden_layers (dense ones zero), top_k.
    raw = np.frombuffer(base64.b64decode(r["meta_info"]["routed_experts"]), dtype="<i4")
    assert raw.size == (len(prompt) + len(out) - 1) * eng.model.config.num_hidden_layers * 2
    assert routing.shape == (len(prompt) + len(out) - 1, 3, 2)
    lp, own = _full_forward(eng, prompt + out, 0.7)
    assert torch.equal(own[:-1].sort(-1).values, torch.from_numpy(routing).long().sort(-1).values)
    want = [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(out)]
    got = [e[0] for e in r["meta_info"]["output_token_logprobs"]]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4, "log-probs are at the sampling temperature"
    start = eng.generate({"input_ids": prompt, "return_routed_experts": True, "routed_experts_start_len": 5,
                          "sampling_params": {"temperature": 0.7, "max_new_tokens": 8, "seed": 3, "stop_token_ids": []}})
    assert (testkit.routing_of(eng, start) == routing[5:]).all()


def test_finish_reasons(engines):
    eng = engines("qwen3_moe")
    prompt = testkit.prompt_ids(eng, SYSTEM, "stop")
    greedy = eng.generate({"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 3}})
    t = greedy["output_ids"][0]
    r = eng.generate({"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 3, "stop_token_ids": [t]}})
    assert r["output_ids"] == [t] and r["meta_info"]["finish_reason"] == {"type": "stop", "matched": t}
    with pytest.raises(httpjson.HTTPError, match="temperature"):
        eng.generate({"input_ids": prompt, "sampling_params": {"temperature": -1}})
    with pytest.raises(httpjson.HTTPError, match="context"):
        eng.generate({"input_ids": prompt, "sampling_params": {"max_new_tokens": 5000}})


def test_prefix_cache_keeps_the_routing_a_context_was_sampled_under(tiny):
    """With router noise, a second turn re-routes nothing it has cached: the
    routing its prefix was recorded with is the routing it was sampled under.
    Without the cache the prefix is re-routed (with new noise)."""
    on = make_engine(tiny("qwen3_moe"), router_jitter=1.0)
    off = make_engine(tiny("qwen3_moe"), router_jitter=1.0, disable_radix_cache=True)
    for eng, cached in ((on, True), (off, False)):
        prompt = testkit.prompt_ids(eng, SYSTEM, "two turns")
        first = eng.generate({"input_ids": prompt, "return_routed_experts": True,
                              "sampling_params": {"max_new_tokens": 6, "seed": 1, "stop_token_ids": []}})
        hist = prompt + first["output_ids"]
        r1 = testkit.routing_of(eng, first)
        second = eng.generate({"input_ids": hist + prompt, "return_routed_experts": True,
                               "sampling_params": {"max_new_tokens": 6, "seed": 2, "stop_token_ids": []}})
        r2 = testkit.routing_of(eng, second)
        # The cache holds what was forwarded: all of hist but its last sampled token.
        assert second["meta_info"]["cached_tokens"] == (len(hist) - 1 if cached else 0)
        assert ((r2[:len(hist) - 1] == r1).all()) == cached


def test_dense_layers_are_zero_filled(tiny):
    """A Qwen3-MoE with mlp_only_layers: SGLang's layout keeps every layer,
    the dense one all zeros, and config_json names the MoE layers' source."""
    src = tiny("qwen3_moe")
    d = src + "-dense1"
    if not os.path.isdir(d):
        shutil.copytree(src, d)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        cfg["mlp_only_layers"] = [1]
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
    eng = make_engine(d)
    assert eng.model.t1_routing.moe_layers == [0, 2] and eng.info()["config"]["mlp_only_layers"] == [1]
    prompt = testkit.prompt_ids(eng, SYSTEM, "dense")
    r = eng.generate({"input_ids": prompt, "return_routed_experts": True,
                      "sampling_params": {"max_new_tokens": 3, "seed": 1, "stop_token_ids": []}})
    raw = np.frombuffer(base64.b64decode(r["meta_info"]["routed_experts"]), dtype="<i4").reshape(-1, 3, 2)
    assert raw.shape[0] == len(prompt) + len(r["output_ids"]) - 1
    assert (raw[:, 1] == 0).all() and (raw[:, [0, 2]] != raw[:, [0, 2]][:, :, ::-1]).all()
