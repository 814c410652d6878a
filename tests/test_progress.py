"""The progress reporter: stage lines, counters in place on a terminal, throttled elsewhere."""

from __future__ import annotations

import io

from dpsynth import progress


def test_library_is_silent_without_a_reporter(capsys):
    progress.say("encode: started")
    progress.count("encode", 10, 100, "rows")
    progress.warn("careful")
    assert capsys.readouterr() == ("", "")


def test_pipe_prints_counters_throttled_and_the_last_value():
    sink = io.StringIO()
    with progress.reporting(progress.Console(sink, interval=3600)):
        progress.say("measure: started")
        for i in range(1, 50):
            progress.count("measure: AIM rounds", i, 100, "units")
        progress.say("measure: done in 1.00 s")
    lines = sink.getvalue().splitlines()
    assert lines[0] == "measure: started" and lines[-1] == "measure: done in 1.00 s"
    counters = lines[1:-1]
    assert len(counters) == 2, lines  # the first, then the last before the next line; not 49
    assert counters[0].startswith("measure: AIM rounds: 1 of 100 units")
    assert counters[1].startswith("measure: AIM rounds: 49 of 100 units") and counters[1].endswith("49%")


def test_terminal_rewrites_the_counter_in_place():
    sink = io.StringIO()
    with progress.reporting(progress.Console(sink, tty=True)):
        for i in range(0, 101, 50):
            progress.count("sampling", i, 100, "columns")
    text = sink.getvalue()
    assert text.count("\r") == 3 and text.count("\n") == 1 and text.endswith("100%\x1b[K\n")


def test_advance_keeps_a_running_total_per_reporter():
    sink = io.StringIO()
    with progress.reporting(progress.Console(sink, interval=0)):
        progress.advance("encode", 1000, "rows")
        progress.advance("encode", 500, "rows")
    assert sink.getvalue().splitlines() == ["encode: 1,000 rows", "encode: 1,500 rows"]
    again = io.StringIO()
    with progress.reporting(progress.Console(again, interval=0)):
        progress.advance("encode", 7, "rows")
    assert again.getvalue() == "encode: 7 rows\n"


def test_quiet_console_keeps_warnings_only():
    sink = io.StringIO()
    with progress.reporting(progress.Console(sink, show=False, warn_prefix="dpsynth: ")):
        progress.say("encode: started")
        progress.count("encode", 5, 10)
        progress.warn("no cap")
    assert sink.getvalue() == "dpsynth: warning: no cap\n"


def test_figures_are_rounded_for_people():
    assert progress.fmt(0.9999999999999815) == "1"
    assert progress.fmt(1.4509999999) == "1.451"
    assert progress.fmt(1048576) == "1,048,576"
    assert progress.fmt(0.000123456) == "0.0001235"


def test_cli_console_drops_the_runs_own_records_once_the_reporter_says_them():
    """Defect: a plan warning showed twice with the Prefect engine (Prefect's console line
    and the CLI's `dpsynth: warning:` line)."""
    import logging

    from dpsynth.orchestration.runner import _ConsoleFilter

    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "epsilon 100000 is so large", None, None)

    f = _ConsoleFilter()
    assert not f.filter(record("prefect.flow_runs", logging.WARNING))
    assert not f.filter(record("prefect.task_runs", logging.INFO))
    assert f.filter(record("prefect.client", logging.WARNING))  # Prefect's own warnings still show
    assert not f.filter(record("prefect.client", logging.ERROR))  # the CLI's one error line replaces these


def test_notes_show_even_when_quiet():
    sink = io.StringIO()
    with progress.reporting(progress.Console(sink, show=False, warn_prefix="dpsynth: ")):
        progress.note("privacy registry /ws/registry.sqlite: charged")
    assert sink.getvalue() == "dpsynth: privacy registry /ws/registry.sqlite: charged\n"
