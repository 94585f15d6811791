from kernelopt.harness.isolate import run_in_child


def test_child_returns_value():
    res = run_in_child("selftest", {"action": "echo", "x": 1}, timeout_s=60)
    assert res.ok and res.value == {"echo": {"action": "echo", "x": 1}}


def test_child_timeout_is_reported_and_killed():
    res = run_in_child("selftest", {"action": "sleep", "seconds": 30}, timeout_s=2)
    assert not res.ok and res.error_kind == "timeout"
    assert res.elapsed_s < 20


def test_child_segfault_is_a_crash_not_a_parent_failure():
    res = run_in_child("selftest", {"action": "segfault"}, timeout_s=60)
    assert not res.ok and res.error_kind == "crash" and "SIGSEGV" in res.message


def test_child_exception_is_runtime_with_message():
    res = run_in_child("selftest", {"action": "raise"}, timeout_s=60)
    assert not res.ok and res.error_kind == "runtime" and "boom" in res.message


def test_child_classified_error():
    res = run_in_child("selftest", {"action": "compile_error"}, timeout_s=60)
    assert res.error_kind == "compile" and res.message == "bad kernel"
