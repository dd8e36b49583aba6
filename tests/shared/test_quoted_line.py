"""Which line of a termination message a Failed or Restarting condition quotes (hooks.shared.termination).

Under FallbackToLogsOnError the kubelet makes a failed container's termination message from the
tail of its log: the last 80 lines, then the last 2,048 bytes. `kubelet_tail` cuts a log the same
way, so the cases below are what a real cluster gives the hooks.
"""
from __future__ import annotations

import pytest

from hooks.shared.termination import LOG_TAIL_BYTES, MAX_MESSAGE, Said, exit_words, how_it_ended, quoted_line


def kubelet_tail(log: str) -> str:
    """A log as the kubelet's FallbackToLogsOnError message: its last 80 lines, then its last 2,048 bytes."""
    return "\n".join(log.splitlines()[-80:]).encode()[-LOG_TAIL_BYTES:].decode(errors="ignore")


PROGRESS = "\n".join(f"epoch {n} loss={n / 1000:.3f} accuracy=0.{n:03d} (step {n * 40} of 8000)" for n in range(200))
TRACEBACK = ("Traceback (most recent call last):\n"
             '  File "train.py", line 12, in <module>\n'
             "    main()\n"
             '  File "train.py", line 9, in main\n'
             '    raise ValueError("the learning rate must be positive")\n'
             "ValueError: the learning rate must be positive\n")
CHAINED = ("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'lr'\n\n"
           "During handling of the above exception, another exception occurred:\n\n"
           "Traceback (most recent call last):\n  File \"a.py\", line 3\n"
           "RuntimeError: no learning rate in the config\n")

DASHES = "-" * 74
MPIEXEC = (f"usage: train.py [-h] [--epochs EPOCHS]\ntrain.py: error: argument --epochs: invalid int value: 'x'\n{DASHES}\n"
           "Primary job  terminated normally, but 1 process returned\n"
           f"a non-zero exit code. Per user-direction, the job has been aborted.\n{DASHES}\n{DASHES}\n"
           "mpiexec detected that one or more processes exited with non-zero status, thus causing\n"
           f"the job to be terminated. The first process to do so was:\n\n  Process name: [[4,1],0]\n  Exit code:    2\n"
           f"{DASHES}\n")

CASES = {
    # (log or message, log_tail) -> what is quoted
    "error-line-after-200-lines": (kubelet_tail(PROGRESS + "\nERROR: checkpoint /data/ckpt is not writable\n"), True,
                                   Said("ERROR: checkpoint /data/ckpt is not writable")),
    "error-line-then-shutdown-chatter": (kubelet_tail(PROGRESS + "\nERROR: disk full\nclosing kvstore\nbye\n"), True,
                                         Said("ERROR: disk full")),
    "traceback-exception-line": (kubelet_tail(PROGRESS + "\n" + TRACEBACK), True,
                                 Said("ValueError: the learning rate must be positive")),
    "traceback-then-atexit-output": (TRACEBACK + "flushing logs\n", True,
                                     Said("ValueError: the learning rate must be positive")),
    "chained-traceback-last-exception": (CHAINED, True, Said("RuntimeError: no learning rate in the config")),
    "progress-only-is-a-log-line": (kubelet_tail(PROGRESS), True,
                                    Said("epoch 199 loss=0.199 accuracy=0.199 (step 7960 of 8000)", log=True)),
    "metric-named-error-is-progress": ("epoch 3 Train-error=0.05\nepoch 4 validation error: 0.04\n", True,
                                       Said("epoch 4 validation error: 0.04", log=True)),
    # mpiexec's own notices after a rank failed ("the job has been aborted") are not the rank's error.
    "mpiexec-notices-after-the-error": (MPIEXEC, True, Said("train.py: error: argument --epochs: invalid int value: 'x'")),
    "mpiexec-notice-alone": (f"{DASHES}\nthe job has been aborted.\n{DASHES}\n", True,
                             Said("the job has been aborted.")),
    "one-line-log-is-whole": ("ERROR: no GPU found\n", True, Said("ERROR: no GPU found")),
    "file-policy-last-line-as-written": ("checkpoint saved\nshard 3 is missing\n", False, Said("shard 3 is missing")),
    "file-policy-traceback": (TRACEBACK, False, Said("ValueError: the learning rate must be positive")),
    "blank-message": ("\n  \n", True, None),
    "not-a-string": (7, True, None),
}


@pytest.mark.parametrize(("message", "log_tail", "quoted"), list(CASES.values()), ids=list(CASES))
def test_the_line_quoted(message, log_tail, quoted):
    assert quoted_line(message, log_tail=log_tail) == quoted


def test_the_tail_is_cut_where_the_kubelet_cuts_it_and_its_first_line_is_never_quoted():
    tail = kubelet_tail(PROGRESS)
    first = tail.splitlines()[0]
    # 80 lines of progress are more than 2,048 bytes: the tail begins with a piece of a line.
    assert len(tail.encode()) == LOG_TAIL_BYTES and first not in PROGRESS.splitlines()
    # The piece at the start is not quoted even when it looks like an error.
    assert quoted_line(kubelet_tail("x" * 3000 + " failed\nepoch 1\n"), log_tail=True) == Said("epoch 1", log=True)
    # A cut tail whose only whole line is its last: that line, never the piece before it.
    only = kubelet_tail("x" * 5000 + "\nERROR: out of disk\n")
    assert quoted_line(only, log_tail=True) == Said("ERROR: out of disk")
    # A single line longer than the tail: nothing whole is left to quote.
    assert quoted_line(kubelet_tail("ERROR " + "y" * 5000), log_tail=True) is None


def test_a_quoted_line_is_bounded_and_says_it_was_cut():
    said = quoted_line("ERROR: " + "z" * 1000, log_tail=True)
    assert said is not None and len(said.text) == MAX_MESSAGE and said.text.endswith("…")


@pytest.mark.parametrize(("code", "words"), [
    (None, "no exit code"), (0, "exit code 0"), (1, "exit code 1"), (128, "exit code 128"),
    (134, "exit code 134, killed by SIGABRT"), (137, "exit code 137, killed by SIGKILL"),
    (138, "exit code 138"), (139, "exit code 139, killed by SIGSEGV"), (143, "exit code 143, killed by SIGTERM"),
], ids=lambda v: str(v))
def test_an_exit_code_names_the_signal_that_killed_the_process(code, words):
    assert exit_words(code) == words


@pytest.mark.parametrize(("said", "words"), [
    (Said("ERROR: x"), "exit code 1, reason Error: 'ERROR: x'"),
    (Said("epoch 3", log=True), "exit code 1, reason Error, last log line: 'epoch 3'"),
    (None, "exit code 1, reason Error"),
], ids=["error-line", "log-line", "nothing-said"])
def test_how_it_ended(said, words):
    assert how_it_ended(1, "Error", said) == words
