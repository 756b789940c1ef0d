"""pytest set-up for tests/py: makes gir_builder importable and names the
graft binary in the report header. (No autouse fixtures: other test modules
here, e.g. the ONNX import tests, decide for themselves what they need.)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gir_builder import graft_bin  # noqa: E402


def pytest_report_header(config):
    return "graft binary: %s%s" % (graft_bin(), "" if os.path.exists(graft_bin()) else " (missing)")
