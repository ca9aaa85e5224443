"""The progress bar `convert` draws (and the `grain` commands share), and `format_rate`."""

import io
import time

from grain_convert.extension import ProgressBar, format_rate


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_draws_only_on_a_terminal():
    terminal = _Terminal()
    bar = ProgressBar(10, "convert", stream=terminal)
    bar.update(1)  # within its first tenth of a second: not drawn
    time.sleep(0.11)
    bar.update(5)
    bar.update(10)  # within a tenth of a second of the last draw: not drawn
    bar.close()
    drawn = terminal.getvalue()
    draws = drawn.split("\r")[1:]
    assert len(draws) == 2
    assert draws[0].startswith("convert [###############...............] 5/10 records")
    assert draws[1].startswith("convert [##############################] 10/10 records")
    assert drawn.endswith("\n")

    pipe = io.StringIO()
    bar = ProgressBar(10, "convert", stream=pipe)
    bar.update(10)
    bar.close()
    assert pipe.getvalue() == ""  # a short run off a terminal prints nothing


def test_progress_off_a_terminal_is_a_line_every_few_seconds():
    pipe = io.StringIO()
    bar = ProgressBar(10, "  convert", stream=pipe, line_interval_s=0.05)
    bar.update(1)  # before the first interval: nothing
    time.sleep(0.06)
    bar.update(4)
    bar.update(5)  # within the interval of the last line: nothing
    bar.close()
    lines = pipe.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("convert: 4/10 records (40%), ")
    assert lines[1].startswith("convert: 5/10 records (50%), ")
    assert "\r" not in pipe.getvalue()
    assert all(line.endswith(" s") for line in lines)


def test_rates_take_a_prefix_and_a_unit():
    assert format_rate(14_300_000) == "14.3 M/s"
    assert format_rate(25_900, "records") == "25.9 k records/s"
    assert format_rate(810, "batches") == "810.0 batches/s"
