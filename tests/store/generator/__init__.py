"""The event generator: reproducible simulated servers, the paced XADD writer on real Redis, its command line and
its fleets; and the input's other writer, the job's idle markers. A module each."""

from watermark_client.timeutil import parse_iso_us

START = parse_iso_us("2026-01-01T00:00:00Z")
"""Where every test's simulated event time starts."""
