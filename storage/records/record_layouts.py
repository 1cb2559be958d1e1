"""The layout of a header-less v2 record, and the check that a run of records has it: the fast path of the
records-section walker in `record_columns`.

Producers write runs of records of one size (same key and value lengths, varints of one width). A layout is
parsed from one record in Python (or recognised among the recently parsed ones) and says where its fields lie and
which of its bytes every record of the same layout shares: the length varint, keyLength, valueLength and every
byte of headerCount, compared exactly, and the two delta varints, compared on their continuation bit only (same
width, any value). A record with those bytes is framed exactly as the one the layout was parsed from.

Those bytes are compared as 8-byte little-endian words, one strided view per word over the whole run:

- `windows`, words inside one record (a 122-byte record with an 11-byte key: 3), check the record a run starts
  at (`RecordLayout.fits`, in Python);
- `run_windows` check the records after it, each word placed so that it may reach back into the record before:
  headerCount ends a record and the length varint starts the next, so one word covers both (the same record:
  2 words). The last record's headerCount, which no word of a following record covers, is compared alone.
  Measured on a 1 MB batch of 8,300 records right after its CRC pass (its bytes out of the nearest caches, as
  in an append): ~20 us for the 8,128 records of its longest run, against ~29 us with words inside each record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storage.errors import CorruptRecordError
from storage.records.varint import VARINT32_MAX_BYTES, VARINT64_MAX_BYTES, decode_varint

# The smallest record: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount.
MIN_RECORD_BYTES = 7
# A long run is first probed on this many records, so that records of changing shapes cost a small check each
# (not one after a run this long: a producer writing one shape, its offset deltas now a byte wider).
RUN_PROBE_RECORDS = 64
# The layout path decodes deltas column by column in uint64: a 9-byte varlong (63 bits) and a 4-byte varint
# (28 bits) cannot overflow; wider ones (never written for real deltas) take the generic path.
MAX_RUN_TIMESTAMP_WIDTH = 9
MAX_RUN_OFFSET_WIDTH = 4
# A window is one uint64 word of each record.
WORD_BYTES = 8


@dataclass(frozen=True, slots=True)
class LayoutWindow:
    """Eight bytes at `at` (from a record's start; negative: in the record before) in every record of a layout,
    read as one little-endian uint64 per record: the record has the layout where `word & mask == expected`."""

    at: int
    mask: int
    expected: int
    mask_word: np.uint64
    expected_word: np.uint64

    def matches(self, data: bytes | memoryview, start: int) -> bool:
        """Whether the record at `start` holds the expected bits (it must extend past `at` + 8)."""
        word = int.from_bytes(data[start + self.at : start + self.at + WORD_BYTES], "little")
        return word & self.mask == self.expected


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """Where the fields of one header-less record lie, relative to where the record starts, and the words that
    compare the bytes every record of the layout shares (see the module docstring); `header_count` is the bytes
    of its headerCount varint, which end the record."""

    stride: int
    timestamp_width: int
    offset_width: int
    body_at: int
    key_at: int
    key_length: int
    value_at: int
    value_length: int
    timestamp_at: int
    offset_at: int
    header_count: bytes
    windows: tuple[LayoutWindow, ...]
    run_windows: tuple[LayoutWindow, ...]

    def fits(self, data: bytes | memoryview, start: int) -> bool:
        """Whether the record at `start` has this layout: its shared bytes are those of the record the layout was
        parsed from, so it is framed exactly as that one was."""
        return start + self.stride <= len(data) and all(window.matches(data, start) for window in self.windows)


# The layouts most recently parsed, newest first. A producer sends batches of the same shape, and each batch
# holds a few runs (offset deltas widen at 64 and 8192): recognising the record at the start of a run by its
# windows costs ~1 us a window, parsing its layout ~40 us. A tuple, replaced whole, so threads never see it half
# updated.
_recent_layouts: tuple[RecordLayout, ...] = ()
RECENT_LAYOUTS = 8


def layout_at(data: bytes | memoryview, start: int) -> RecordLayout | None:
    """The layout of the record at `start` (see `_parse_layout`), found among the recent ones when it is there."""
    global _recent_layouts
    for known in _recent_layouts:
        if known.fits(data, start):
            return known
    parsed = _parse_layout(data, start)
    if parsed is not None:
        _recent_layouts = (parsed, *_recent_layouts[: RECENT_LAYOUTS - 1])
    return parsed


def _parse_layout(data: bytes | memoryview, start: int) -> RecordLayout | None:
    """The layout of the record at `start` if it is well-formed, header-less and narrow enough for the run path;
    None otherwise (the generic path then decodes it, and raises if it is malformed)."""
    try:
        length, body = decode_varint(data, start, VARINT32_MAX_BYTES)
        body_end = body + length
        if length < MIN_RECORD_BYTES - 1 or body_end > len(data):
            return None
        _, offset_at = decode_varint(data, body + 1, VARINT64_MAX_BYTES)
        _, key_length_at = decode_varint(data, offset_at, VARINT32_MAX_BYTES)
        key_length, key_at = decode_varint(data, key_length_at, VARINT32_MAX_BYTES)
        value_length_at = key_at + max(key_length, 0)
        value_length, value_at = decode_varint(data, value_length_at, VARINT32_MAX_BYTES)
        header_count_at = value_at + max(value_length, 0)
        header_count, end = decode_varint(data, header_count_at, VARINT32_MAX_BYTES)
    except CorruptRecordError:
        return None
    timestamp_width = offset_at - body - 1
    offset_width = key_length_at - offset_at
    if (
        key_length < -1
        or value_length < -1
        or header_count != 0
        or end != body_end
        or timestamp_width > MAX_RUN_TIMESTAMP_WIDTH
        or offset_width > MAX_RUN_OFFSET_WIDTH
    ):
        return None
    stride = end - start
    if stride < WORD_BYTES:
        return None
    exact = [*range(start, body), *range(key_length_at, key_at), *range(value_length_at, value_at)]
    exact += range(header_count_at, end)  # every byte: an over-long headerCount (0x80 0x00) is still 0
    masks = {position - start: 0xFF for position in exact} | {
        position - start: 0x80 for position in range(body + 1, key_length_at)
    }
    # For `run_windows` the headerCount bytes are counted back from the start of the record that follows them.
    tail = end - header_count_at
    run_masks = {
        (position - stride if position >= stride - tail else position): bits for position, bits in masks.items()
    }
    return RecordLayout(
        stride=stride,
        timestamp_width=timestamp_width,
        offset_width=offset_width,
        body_at=body - start,
        key_at=key_at - start,
        key_length=key_length,
        value_at=value_at - start,
        value_length=value_length,
        timestamp_at=body + 1 - start,
        offset_at=offset_at - start,
        header_count=bytes(data[header_count_at:end]),
        windows=_windows(data, start, stride, masks, stride - WORD_BYTES),
        run_windows=_windows(data, start, stride, run_masks, stride - tail - WORD_BYTES),
    )


def _windows(
    data: bytes | memoryview, start: int, stride: int, masks: dict[int, int], last: int
) -> tuple[LayoutWindow, ...]:
    """The fewest 8-byte words, none starting after `last`, that cover the bytes `masks` names (position from a
    record's start, negative in the record before -> bits compared), with what the record at `start` (a
    `stride`-byte record like every other) holds there."""
    windows: list[LayoutWindow] = []
    remaining = sorted(masks)
    while remaining:
        at = min(remaining[0], last)
        covered = [position for position in remaining if position < at + WORD_BYTES]
        mask = expected = 0
        for position in covered:
            shift = 8 * (position - at)
            mask |= masks[position] << shift
            expected |= (data[start + position % stride] & masks[position]) << shift
        windows.append(LayoutWindow(at, mask, expected, np.uint64(mask), np.uint64(expected)))
        remaining = remaining[len(covered) :]
    return tuple(windows)


def matching_run_length(
    data: bytes | memoryview, array: np.ndarray, start: int, layout: RecordLayout, remaining: int, probe: bool
) -> int:
    """How many records from `start` (whose record `layout.fits`; at least that one, at most `remaining`) have
    exactly `layout` (`probe`: see `_probed_rows`); `array` is `data` as uint8.

    Producers number the records of a batch 0, 1, 2, ...: a run usually ends where the offset delta outgrows its
    width (at 64 and 8192). The records up to there are checked first, then the one record after them, so that
    the common end of a run costs no pass over the records after it."""
    rows = min(remaining, (len(array) - start) // layout.stride)
    offset_delta, _ = decode_varint(data, start + layout.offset_at, VARINT32_MAX_BYTES)
    # Zig-zag doubles a delta: deltas below 2 ** (7 * width - 1) fit in `width` bytes.
    boundary = (1 << (7 * layout.offset_width - 1)) - offset_delta
    if 0 < boundary < rows:
        matched = _probed_rows(array, start, layout, boundary, probe)
        if matched == boundary and layout.fits(data, start + boundary * layout.stride):
            matched += _probed_rows(array, start + boundary * layout.stride, layout, rows - boundary, probe)
        return matched
    return _probed_rows(array, start, layout, rows, probe)


def _probed_rows(array: np.ndarray, start: int, layout: RecordLayout, rows: int, probe: bool) -> int:
    """`_matching_rows`, checking a long stretch on its first `RUN_PROBE_RECORDS` records first if `probe`."""
    if rows <= 4 * RUN_PROBE_RECORDS or not probe:
        return _matching_rows(array, start, layout, rows)
    matched = _matching_rows(array, start, layout, RUN_PROBE_RECORDS)
    return _matching_rows(array, start, layout, rows) if matched == RUN_PROBE_RECORDS else matched


def _matching_rows(array: np.ndarray, start: int, layout: RecordLayout, rows: int) -> int:
    """How many of the `rows` records from `start` have `layout`, counted until the first that does not; the
    record at `start` has it (`fits`).

    Records 1.. are compared with `run_windows`: the first word that differs, in record i, lies in record i or in
    the headerCount of record i - 1; the records before i - 1 are whole, and that headerCount is compared alone."""
    stride = layout.stride
    same: np.ndarray | None = None
    for window in layout.run_windows if rows > 1 else ():
        words = np.ndarray((rows - 1,), dtype="<u8", buffer=array, offset=start + stride + window.at, strides=(stride,))
        matches = (words & window.mask_word) == window.expected_word
        if same is None:
            same = matches
        else:
            same &= matches
    checked = rows if same is None or bool(same.all()) else int(np.argmin(same)) + 1
    end = start + checked * stride
    return checked if array[end - len(layout.header_count) : end].tobytes() == layout.header_count else checked - 1
