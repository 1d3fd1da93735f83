"""A smoke run of bench.py (`make bench-hf`, docs/bench.md's "Hugging Face
backend") at its --quick size: the section it prints, its tables' shapes and
sane figures, and the splice that keeps the rest of the file."""
import argparse

import bench


def table(md, header):
    """The body rows (cells) of the markdown table whose header starts with header."""
    lines = md.split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith(header))
    assert lines[i + 1].startswith("|---"), f"table {header!r} has no separator row"
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_quick_bench_prints_its_section_and_splices_it(tmp_path):
    args = argparse.Namespace(arch="qwen3_moe", device="cpu", dtype=None, threads=1, quick=True)
    res = bench.run(args)
    md = bench.markdown(res, args.arch)
    assert md.startswith(bench.SECTION + "\n")
    rows = table(md, "| what | figure | note |")
    # --quick leaves out the two multi-turn rows.
    assert [r[0].split(",")[0] for r in rows] == ["inference"] * 2 + ["trainer sft", "trainer ppo_step"], rows
    for r in rows:
        assert len(r) == 3 and float(r[1]) > 0, r
    gaps = table(md, "| sampler | without R3")
    assert [r[0] for r in gaps] == ["float32 sampler", "float32 sampler, router jitter 1.0"], gaps
    exact, jitter = res["gaps"]["float32 sampler"], res["gaps"]["float32 sampler, router jitter 1.0"]
    assert exact["replay_mean"] < 1e-3 and exact["flips"] == 0, exact
    assert jitter["flips"] > 0 and jitter["replay_mean"] < jitter["free_mean"], jitter
    assert 0 <= res["approx_kl"] < 1 and 0 <= res["clipfrac"] <= 1, res

    out = tmp_path / "bench.md"
    out.write_text("# Benchmarks\n\n## Before\nkept\n\n" + bench.SECTION + "\nold figures\n\n## After\nkept too\n")
    bench.splice(str(out), md)
    text = out.read_text()
    assert "old figures" not in text and text.count(bench.SECTION + "\n") == 1
    assert "## Before\nkept\n" in text and "## After\nkept too\n" in text and md in text
