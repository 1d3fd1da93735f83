def test_error_count():
    # A small literal: the sandbox's own files (the sealed verifier toolchain
    # among them) hold "3" in many places, and none of them is a leak.
    assert open("/app/error_count.txt").read().strip() == "3"
