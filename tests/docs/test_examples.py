"""The examples of the docs and the README cannot drift: every block a user would run is either
run here, as it is, and prints what the page says it prints, or is marked as not runnable with
the reason (tests/support/docs.py says how blocks are marked)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.common import ROOT
from support.docs import (
    READ_ONLY,
    RUNNABLE,
    Example,
    blocks,
    documents,
    examples,
    printed_pattern,
)

EXAMPLES = examples()


def test_every_runnable_block_is_an_example_or_says_why_it_is_not():
    unmarked = []
    for path in documents():
        for block in blocks(path):
            if block.language in READ_ONLY:
                continue
            if block.language not in RUNNABLE:
                unmarked.append(f"{block.where}: language {block.language!r} is not known here")
            elif block.example is None and block.not_run is None:
                unmarked.append(f"{block.where}: a {block.language or 'plain'} block")
    assert not unmarked, (
        "these code blocks are neither examples that a test runs nor marked as not runnable: "
        "wrap each in <!-- example:NAME --> ... <!-- /example --> with the text block of what "
        "it prints, or put <!-- not-run: REASON --> on the line before it:\n" + "\n".join(unmarked)
    )


def test_examples_have_unique_names_and_are_found():
    names = [example.name for example in EXAMPLES]
    assert len(names) == len(set(names)), names
    # the formats' pages each have a complete example, and the getting-started script
    assert {"first_query", "zeroeq", "ebus", "goby", "yamz"} <= set(names)


def test_an_output_block_must_match_as_a_whole():
    """The check of what an example prints can fail: ``...`` spans text within a line only."""
    pattern = printed_pattern('{"publisher": "127.0.0.1:...", "event": "x"}\n')
    assert pattern.search('{"publisher": "127.0.0.1:40591", "event": "x"}')
    assert not pattern.search('{"publisher": "127.0.0.1:40591", "event": "y"}')
    assert not printed_pattern("a...b\n").search("a\nb")


def run_example(example: Example, folder: Path) -> subprocess.CompletedProcess:
    """Runs an example in a fresh folder, with this interpreter (and its bin folder first on
    the PATH, for ``python`` in bash examples), in a network namespace of its own (the tests
    running beside it announce ZeroEQ publishers that an example's discovery would also find:
    a CI run read a gap row of another test's publisher), with a temporary folder of its own
    (a default spool folder is named by the options, so a run of the same example, earlier on
    the machine, would leave it one); kills whatever it left running."""
    temporary = folder / "tmp"
    temporary.mkdir()
    env = dict(os.environ, SPARK_ZMQ_LOG_LEVEL="WARNING", TMPDIR=str(temporary))
    env.pop("SPARK_ZMQ_NETNS", None)  # scripts/netns.sh makes a namespace, nested in ours
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    script = folder / ("example.py" if example.language == "python" else "example.sh")
    script.write_text(example.code)
    command = [sys.executable, str(script)] if example.language == "python" else ["bash", "-e"]
    if example.language == "bash":
        command.append(str(script))
    command = ["bash", str(ROOT / "scripts" / "netns.sh"), *command]
    process = subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"{example.where}: example {example.name} ran over 300 s\n{err[-3000:]}")
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)  # background peers of a bash example
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def starts_spark(example: Example) -> bool:
    return any(word in example.code for word in ("SparkSession", "loopback_session", "spark-"))


def example_params():
    return [
        pytest.param(
            example,
            id=example.name,
            marks=(pytest.mark.spark, pytest.mark.jvms) if starts_spark(example) else (),
        )
        for example in EXAMPLES
    ]


@pytest.mark.parametrize("example", example_params())
def test_example_prints_what_its_page_shows(example: Example, tmp_path):
    result = run_example(example, tmp_path)
    assert result.returncode == 0, f"{example.where}: {example.name}\n{result.stderr[-3000:]}"
    assert printed_pattern(example.printed).search(result.stdout), (
        f"{example.where}: example {example.name} did not print what its page shows:\n"
        f"{example.printed}\nIt printed:\n{result.stdout}\nIts warnings:\n"
        + "\n".join(line for line in result.stderr.splitlines() if " WARNING " in line)[-3000:]
    )
