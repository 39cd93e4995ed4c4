"""compute-sanitizer on the GPU: locate it, wrap workers in it, parse and attribute its reports."""

from .locate import Sanitizer, find_sanitizer, gpu_available
from .parse import parse_text, parse_xml
from .selftest import self_test
from .session import sanitizer_wrapper, violations_in_log

__all__ = ["Sanitizer", "find_sanitizer", "gpu_available", "parse_text", "parse_xml", "sanitizer_wrapper",
           "self_test", "violations_in_log"]
