#!/usr/bin/env python3
"""Differential oracle for the Rust replay validator (functions/core/src/domain/replay.rs).

Writes replay files to OUT_DIR, valid ones written by osrparse and corrupt ones made by
mutating bytes or by hand-building LZMA frame blocks, plus OUT_DIR/manifest.json with
osrparse 7.0.1's verdict on each: accepted means `Replay.from_string` raised nothing.

Usage: gen_cases.py OUT_DIR   (deterministic: fixed seed)
"""

import json
import lzma
import os
import random
import struct
import sys
import zlib
from datetime import datetime, timedelta, timezone

REQUIRED_VERSION = "7.0.1"

try:
    import osrparse
    from osrparse import (GameMode, Key, KeyMania, KeyTaiko, LifeBarState, Mod, Replay,
                          ReplayEventCatch, ReplayEventMania, ReplayEventOsu, ReplayEventTaiko)
except ImportError:
    sys.exit(f"osrparse is not installed for {sys.executable}; "
             f"run: {sys.executable} -m pip install osrparse=={REQUIRED_VERSION}")
if osrparse.__version__ != REQUIRED_VERSION:
    sys.exit(f"osrparse {osrparse.__version__} found for {sys.executable}, "
             f"the oracle needs osrparse=={REQUIRED_VERSION}")

SEED = 20240123
rng = random.Random(SEED)


# --- encoding helpers ------------------------------------------------------------------

def uleb128(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def osr_string(text):
    """A present string: 0x0b, ULEB128 byte length, UTF-8 bytes (bytes pass through raw)."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return b"\x0b" + uleb128(len(raw)) + raw


NO_STRING = b"\x00"


def alone(text, dict_size=1 << 21):
    """An LZMA "alone" block as osrparse and osu! write it."""
    filters = [{"id": lzma.FILTER_LZMA1, "dict_size": dict_size, "mode": lzma.MODE_FAST}]
    return lzma.compress(text, format=lzma.FORMAT_ALONE, filters=filters)


def alone_known_size(text):
    """Alone block whose header states the size (osrparse's writer leaves it unknown)."""
    block = bytearray(alone(text))
    block[5:13] = struct.pack("<Q", len(text))
    return bytes(block)


def lzip(text):
    raw = lzma.compress(text, format=lzma.FORMAT_RAW, filters=[
        {"id": lzma.FILTER_LZMA1, "dict_size": 1 << 20, "lc": 3, "lp": 0, "pb": 2}])
    header = b"LZIP" + bytes([1, 20])
    return header + raw + struct.pack("<IQQ", zlib.crc32(text), len(text),
                                      len(header) + len(raw) + 20)


def assemble(mode=0, version=20240123, beatmap_hash=None, player=None, replay_hash=None,
             counts=(300, 20, 3, 40, 10, 2), score=1234567, max_combo=321, perfect=0,
             mods=72, life_bar=None, ticks=638416224000000000, block=None, text=None,
             score_id=struct.pack("<q", 4000000000), trailing=b""):
    """Raw .osr bytes; string fields are given already encoded (osr_string / NO_STRING)."""
    if block is None:
        block = alone(text if text is not None else b"0|256|-500|0,16|100|100|1,")
    return (bytes([mode]) + struct.pack("<I", version & 0xFFFFFFFF)
            + (beatmap_hash if beatmap_hash is not None else osr_string("a" * 32))
            + (player if player is not None else osr_string("pyref"))
            + (replay_hash if replay_hash is not None else osr_string("b" * 32))
            + struct.pack("<6H", *counts) + struct.pack("<I", score)
            + struct.pack("<H", max_combo) + bytes([perfect]) + struct.pack("<I", mods)
            + (life_bar if life_bar is not None else osr_string("0|1,2000|0.5,"))
            + struct.pack("<q", ticks) + struct.pack("<I", len(block)) + block
            + score_id + trailing)


class Layout:
    """Offsets of the fields of a well-formed replay (found by walking its header)."""

    def __init__(self, data):
        pos = 5
        self.strings = []
        for _ in range(3):
            pos = self._string(data, pos)
        self.counts = pos
        pos += 12 + 4 + 2 + 1 + 4
        pos = self._string(data, pos)
        self.timestamp = pos
        self.block_len = pos + 8
        (length,) = struct.unpack_from("<I", data, self.block_len)
        self.block = self.block_len + 4
        self.score_id = self.block + length

    def _string(self, data, pos):
        self.strings.append(pos)
        if data[pos] == 0:
            return pos + 1
        pos += 1
        length, shift = 0, 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return pos + length


# --- frames --------------------------------------------------------------------------------

def events_for(mode, count):
    t = 0
    events = []
    for _ in range(count):
        delta = rng.choice([16, 17, 15, 16, 16, 33, 0, -1]) if rng.random() < 0.9 else rng.randint(-50, 500)
        t += delta
        if mode is GameMode.STD:
            events.append(ReplayEventOsu(delta, round(rng.uniform(-50, 560), rng.choice([0, 1, 3, 4])),
                                         round(rng.uniform(-50, 430), rng.choice([0, 2, 4])),
                                         Key(rng.choice([0, 1, 2, 5, 10, 21]))))
        elif mode is GameMode.TAIKO:
            events.append(ReplayEventTaiko(delta, rng.choice([0, 320, 640]), KeyTaiko(rng.randint(0, 15))))
        elif mode is GameMode.CTB:
            events.append(ReplayEventCatch(delta, round(rng.uniform(0, 512), 3), rng.random() < 0.3))
        else:
            events.append(ReplayEventMania(delta, KeyMania(rng.randint(0, (1 << 7) - 1))))
    return events


def make_replay(mode, frames, username="pyref", life_bar=True, seed=1234567, replay_id=4000000000):
    return Replay(
        mode=mode, game_version=20240123,
        beatmap_hash="%032x" % rng.getrandbits(128), username=username,
        replay_hash="%032x" % rng.getrandbits(128),
        count_300=rng.randint(0, 2000), count_100=rng.randint(0, 200), count_50=rng.randint(0, 50),
        count_geki=rng.randint(0, 300), count_katu=rng.randint(0, 100), count_miss=rng.randint(0, 30),
        score=rng.randint(0, 2**31), max_combo=rng.randint(0, 3000), perfect=False,
        mods=Mod(rng.choice([0, 8, 16, 64, 72, 1 << 30])),
        life_bar_graph=[LifeBarState(i * 2000, round(rng.random(), 2)) for i in range(rng.randint(1, 20))]
        if life_bar else None,
        timestamp=datetime(2024, 1, 23, 12, 0, tzinfo=timezone.utc),
        replay_data=events_for(mode, frames), replay_id=replay_id, rng_seed=seed)


# --- the case list ---------------------------------------------------------------------------

cases = []


def add(name, data, exceeds_limits=False):
    cases.append((name, bytes(data), exceeds_limits))


def set_bytes(data, pos, new):
    data = bytearray(data)
    data[pos:pos + len(new)] = new
    return bytes(data)


def valid_bases():
    bases = [
        ("std-50", make_replay(GameMode.STD, 50).pack()),
        ("std-3000", make_replay(GameMode.STD, 3000).pack()),
        ("std-1-no-seed-no-lifebar", make_replay(GameMode.STD, 1, life_bar=False, seed=None, replay_id=0).pack()),
        ("taiko-200", make_replay(GameMode.TAIKO, 200).pack()),
        ("ctb-200", make_replay(GameMode.CTB, 200, username="").pack()),
        ("mania-200", make_replay(GameMode.MANIA, 200, username="x" * 300).pack()),
        ("std-9000", make_replay(GameMode.STD, 9000).pack()),
        ("std-unicode-name", assemble(player=osr_string("Éa日本🎵"), text=b"0|256|-500|0,16|1|2|3,")),
    ]
    # Strings absent (0x00) rather than empty, which osrparse itself never writes.
    bases.append(("std-absent-strings", assemble(beatmap_hash=NO_STRING, player=NO_STRING,
                                                 replay_hash=NO_STRING, life_bar=NO_STRING)))
    bases.append(("std-empty-strings", assemble(beatmap_hash=osr_string(""), player=osr_string(""),
                                                replay_hash=osr_string(""), life_bar=osr_string(""))))
    return bases


def header_mutations(name, data):
    layout = Layout(data)
    # Truncation around every field boundary and inside the frame block and score id.
    boundaries = {0, 1, 4, 5, 6, layout.counts, layout.counts + 12, layout.timestamp,
                  layout.timestamp + 8, layout.block_len, layout.block_len + 4, layout.block,
                  layout.block + 1, layout.block + 13, layout.score_id - 1, layout.score_id,
                  layout.score_id + 3, layout.score_id + 4, layout.score_id + 5, layout.score_id + 7}
    boundaries |= {s + d for s in layout.strings for d in (1, 2, 3)}
    boundaries |= {rng.randrange(layout.block, layout.score_id) for _ in range(4)}
    for cut in sorted(b for b in boundaries if 0 <= b < len(data)):
        add(f"{name}: truncated to {cut} bytes", data[:cut])

    # Random byte flips in the header.
    for _ in range(12):
        pos = rng.randrange(0, layout.block)
        add(f"{name}: header byte {pos} set", set_bytes(data, pos, bytes([rng.randrange(256)])))
    # Random byte flips in the frame block (usually a data error).
    for _ in range(4):
        pos = rng.randrange(layout.block, layout.score_id)
        add(f"{name}: block byte {pos} flipped", set_bytes(data, pos, bytes([data[pos] ^ (1 << rng.randrange(8))])))

    # Mode byte: every mode (data of one mode read as another), and out of range.
    for mode in (0, 1, 2, 3, 4, 7, 255):
        add(f"{name}: mode byte {mode}", set_bytes(data, 0, bytes([mode])))

    # String markers.
    for marker in (0x01, 0x05, 0x0A, 0x0C, 0x8B, 0xFF):
        field = rng.randrange(3)
        add(f"{name}: string {field} marker {marker:#x}", set_bytes(data, layout.strings[field], bytes([marker])))

    # Frame block length field off by a little or a lot.
    (length,) = struct.unpack_from("<I", data, layout.block_len)
    for delta in (-13, -8, -5, -4, -1, 1, 3, 4, 5, 8, 9, 100):
        if length + delta >= 0:
            add(f"{name}: block length {delta:+}", set_bytes(data, layout.block_len, struct.pack("<I", length + delta)))
    for value in (0, 0xFFFFFFFF):
        add(f"{name}: block length {value}", set_bytes(data, layout.block_len, struct.pack("<I", value)))

    # Score id: int32 fallback, 5-7 bytes, and trailing data.
    base = data[:layout.score_id]
    for size in (0, 3, 4, 5, 7):
        add(f"{name}: {size}-byte score id", base + data[layout.score_id:layout.score_id + size])
    add(f"{name}: trailing double", data + struct.pack("<d", 95.5))
    add(f"{name}: trailing garbage", data + bytes(rng.randrange(256) for _ in range(64)))


def string_mutations():
    """Strings built by hand: lengths, encodings, bytes that are not UTF-8."""
    for label, raw in [
        ("unicode", osr_string("Ünïcödé 名前 🎵")), ("empty", osr_string("")), ("absent", NO_STRING),
        ("non-canonical ULEB 2 bytes", b"\x0b\x85\x00hello"),
        ("non-canonical ULEB 12 bytes", b"\x0b\x85" + b"\x80" * 10 + b"\x00hello"),
        ("ULEB 2 bytes", osr_string("y" * 200)),
        ("length one short", b"\x0b\x04hello"), ("length one long", b"\x0b\x06hello"),
        ("huge length", b"\x0b\xff\xff\xff\xff\x0fhello"),
        ("endless ULEB", b"\x0b" + b"\xff" * 40),
        ("invalid byte ff", osr_string(b"ab\xffcd")), ("overlong", osr_string(b"\xc0\xaf")),
        ("surrogate", osr_string(b"\xed\xa0\x80")), ("lone continuation", osr_string(b"\x80")),
        ("cut multibyte", osr_string(b"\xe2\x82")), ("4-byte", osr_string("\U0001D11E")),
        ("above U+10FFFF", osr_string(b"\xf4\x90\x80\x80")), ("NUL inside", osr_string(b"a\x00b")),
        ("BOM", osr_string(b"\xef\xbb\xbfname")),
    ]:
        for field in ("beatmap_hash", "player", "replay_hash"):
            add(f"string {field} {label}", assemble(**{field: raw}))


def life_bar_mutations():
    for raw in ["0|1,", "0|1", "0|1,2000|0.5", "0|1,2000|0.5,", ",", "x", "0|1,,", "0|1,,3|4,",
                "0|,", "|1,", "0,", "0|1|2,", "a|1,", "0|b,", "1.5|1,", "0|1.5e3,", " 0 | 1 ,",
                "0|nan,", "0|-inf,", "1_000|1_0.5,", "1__0|1,", "+1|+1,", "٣|٤,", "0|٣.٥,",
                "\u30000\u3000|1,", "\u00a01|1,", "0|1\u2028,", "0|1 x", "0|1é", "é", "0|1٫5,",
                "0x10|1,", "0|0x10,", "1" * 4300 + "|1,", "1" * 4301 + "|1,", "0|" + "9" * 5000 + ",",
                "\x1c0|1,", "0|1\x85,", "0\x00|1,", "²|1,", "𝟎|𝟏,"]:
        add(f"life bar {raw[:40]!r}", assemble(life_bar=osr_string(raw)))


def timestamp_mutations():
    for ticks in (0, -1, -5, -6, -(2**63), 3155378975999999679, 3155378975999999680,
                  3155378975999999999, 2**63 - 1, 630822816000000000):
        add(f"timestamp {ticks}", assemble(ticks=ticks))


FRAME_TEXTS = [
    b"", b",", b",,,", b"1|2|3|4", b"1|2|3|4,", b"1|2|3|4,,,", b"1|2|3|4,,1|2|3|4,", b",1|2|3|4,",
    b"1|2|3,", b"1|2,", b"1,", b"1|2|3|4,5|6|7,", b"1|2|3|4,5|6|7", b"1|2|3|4|5|6,", b"1|2|3|4|x|,",
    b"a|2|3|4,", b"1|a|3|4,", b"1|2|b|4,", b"1|2|3|c,", b"1.5|2|3|4,", b"1|2|3|4.0,", b"1|2.5|3|4,",
    b"1|2|3.5|4,", b"1|2|3|4, ", b" 1|2|3|4,", b"1|2|3|4 ,",
    # the seed frame
    b"1|2|3|4,-12345|0|0|777,", b"-12345|x|y|7,", b"1|2|3|4,-12345|x|y|7,", b"1|2|3|4,-12345|x|y|7",
    b"-12345|x|y|7,1|2|3|4,", b"1|2|3|4,-12345|0|0|abc,", b"1|2|3|4,-12345|x,", b"1|2|3|4,-012345|x|y|1,",
    b"1|2|3|4,-12_345|x|y|1,", b"1|2|3|4, -12345 |x|y|1,", b"1|2|3|4,-12345.0|x|y|1,",
    b"1|2|3|4,-12345|x|y|7,,,,", b"5|1|1|1,6|1|1|1,-12345|x|y|7,",
    # the (256, -500) frames osrparse drops among the first two
    b"0|256|-500|0,-1|256|-500|0,16|100|100|1,", b"0|256.0|-500|0,-1|256|-500.0|0,16|100|0|1,",
    b"0|256.5|-500|0,16|100|0|1,", b"0|256|-500.5|0,16|100|0|1,", b"0|2.56e2|-5e2|0,16|100|0|1,",
    b"0|256.0000000000000001|-500|0,16|100|0|1,", b"0|256.00000000000001|-500.0000000000001|0,16|100|0|1,",
    b"0|256.0001|-500|0,16|100|0|1,", b"0|256|x|0,16|100|0|1,", b"0|x|-500|0,16|100|0|1,",
    b"0|256|-500|0,1|2|3|4,16|256.0|-500|0,", b"0|256|-500|0,1|2|3|4,16|256.0|-500|0,5|5|5|5,",
    b"0|256|-500|0", b"0|256|-500|0,-1|256|-500|0,", b"0|256_0|-500|0,16|1|1|1,",
    b"0|+256|-500|0,16|1|1|1,", b"0| 256 |-500|0,16|1|1|1,", b"0|256e0|-500|0,16|1|1|1,",
    b"0|256." + b"0" * 900 + b"1|-500|0,16|1|1|1,", b"0|255." + b"9" * 900 + b"|-500|0,16|1|1|1,",
    b"0|0.0000256e7|-500|0,16|1|1|1,", b"0|25600e-2|-500|0,16|1|1|1,", b"0|nan|-500|0,16|1|1|1,",
    # number syntax in time and keys
    b" 1 |2|3|4,5|6|7|8,", b"+1|2|3|+4,5|6|7|8,", b"1_0|2|3|4_0,5|6|7|8,", b"1__0|2|3|4,5|6|7|8,",
    b"_1|2|3|4,5|6|7|8,", b"1_|2|3|4,5|6|7|8,", b"1e5|2|3|4,5|6|7|8,", b"nan|2|3|4,5|6|7|8,",
    b"0x10|2|3|4,5|6|7|8,", b"|2|3|4,5|6|7|8,", b"-|2|3|4,5|6|7|8,", b"\t1\n|2|3|4\x0b,5|6|7|8,",
    b"\x0c1\r|2|3|4,5|6|7|8,", b"\x1c1|2|3|4,5|6|7|8,", b"1|2|3|-4,5|6|7|-99999999999999999999,",
    b"99999999999999999999999|2|3|4,5|6|7|8,", b"1" * 4300 + b"|2|3|4,5|6|7|8,",
    b"1" * 4301 + b"|2|3|4,5|6|7|8,", b"0" * 4301 + b"|2|3|4,5|6|7|8,", b"1|2|3|" + b"0" * 4301 + b",",
    b"1|2|3|" + b"1_" * 4300 + b"1,", b"1|2|3|4,5|6|7|" + b"0" * 4300 + b",",
    # number syntax in x and y
    b"1|nan|inf|4,5|6|7|8,", b"1|-Infinity|+iNf|4,5|6|7|8,", b"1|infinit|3|4,5|6|7|8,",
    b"1|1e5|1E-5|4,5|6|7|8,", b"1|1.|.5|4,5|6|7|8,", b"1|.|3|4,5|6|7|8,", b"1|1e|3|4,5|6|7|8,",
    b"1|1_0.5|3|4,5|6|7|8,", b"1|1_.5|3|4,5|6|7|8,", b"1| 1.5 |3|4,5|6|7|8,", b"1|+1.5|-.5|4,5|6|7|8,",
    b"1|1e1_0|3|4,5|6|7|8,", b"1|2|3|4,5|" + b"7" * 5000 + b"|7|8,", b"1|2|3|4,5|6|" + b"1_" * 3000 + b"1|8,",
    b"1|nan(1)|3|4,5|6|7|8,", b"1|1e99999|3|4,5|6|7|8,", b"1|2|3|4,5|6_|7|8,", b"1|2|3|4,5|6|7x|8,",
    # bytes the ASCII decode rejects, and other odd bytes
    b"1|2|3|4,\xff", b"1|2|3|4|\xc3\xa9,", b"1|2|3|4,5|6|7|8\x00,", b"1|2\x00|3|4,5|6|7|8,",
    b"1|2|3|4,\x7f", b"1|2|3|4|\x7f,5|6|7|8,",
]


def frame_text_cases():
    for text in FRAME_TEXTS:
        for mode in range(4):
            add(f"frames mode {mode} {text[:60]!r}", assemble(mode=mode, text=text))


def fuzz_frame_cases(count):
    tokens = ["0", "1", "-1", "16", "256", "-500", "256.0", "-500.0", "1.5", "-2.25", "1e3", "nan",
              "inf", " 7", "7 ", "+3", "1_2", "x", "", ".", "1.", ".5", "-12345", "0.0001", "3_", "٣"]
    for i in range(count):
        frames = []
        for _ in range(rng.randint(1, 6)):
            fields = [rng.choice(tokens) if rng.random() < 0.35 else str(rng.randint(-20, 600))
                      for _ in range(rng.choice([3, 4, 4, 4, 4, 5]))]
            frames.append("|".join(fields))
        text = ",".join(frames) + rng.choice(["", ",", ",,"])
        mode = rng.randrange(4)
        add(f"fuzz {i} mode {mode} {text[:60]!r}", assemble(mode=mode, text=text.encode("utf-8")))


def noisy_frames(count):
    return "".join(f"{rng.randint(0, 40)}|{rng.uniform(0, 512):.4f}|{rng.uniform(0, 384):.4f}|{rng.randint(0, 15)},"
                   for _ in range(count)).encode()


def broken_stream(text):
    """An alone stream that yields some of `text`, then hits a data error (not a truncation)."""
    clean = alone(text)
    for pos in range(len(clean) // 2, len(clean)):
        for value in (0x00, 0xFF, 0x55):
            broken = set_bytes(clean, pos, bytes([value]))
            try:
                lzma.decompress(broken)
            except lzma.LZMAError as error:
                if "ended before" in str(error):
                    continue
                try:
                    partial = lzma.LZMADecompressor().decompress(broken, max_length=4096)
                except lzma.LZMAError:
                    continue
                if partial:
                    return broken
    raise AssertionError("no corruption found")


def block_cases():
    good = b"0|256|-500|0,-1|256|-500|0,16|100.5|200.25|1,17|101|201|0,-12345|0|0|42,"
    bad = b"16|x|y|1,"
    first = alone(good)
    for label, block in [
        ("alone", first), ("xz", lzma.compress(good)), ("lzip", lzip(good)),
        ("alone, size in header", alone_known_size(good)),
        ("alone, size in header too small", set_bytes(first, 5, struct.pack("<Q", len(good) - 5))),
        ("alone, size in header too large", set_bytes(first, 5, struct.pack("<Q", len(good) + 5))),
        ("alone, 4 KiB dictionary", alone(good, dict_size=4096)),
        ("alone, 3 MiB dictionary", alone(good, dict_size=3 << 20)),
        ("alone, dictionary size not 2^n or 2^n+2^(n-1)", set_bytes(first, 1, struct.pack("<I", 5000))),
        ("alone, bad properties byte", set_bytes(first, 0, b"\xe1")),
        ("xz with CRC32", lzma.compress(good, check=lzma.CHECK_CRC32)),
        ("xz without check", lzma.compress(good, check=lzma.CHECK_NONE)),
        ("xz with SHA-256", lzma.compress(good, check=lzma.CHECK_SHA256)),
        ("xz, corrupt check", set_bytes(lzma.compress(good), -20, b"\x00\x00")),
        ("empty block", b""), ("one byte", b"\x5d"), ("header only", first[:13]),
        ("cut by 1", first[:-1]), ("cut by 6", first[:-6]), ("cut in half", first[: len(first) // 2]),
        ("zeros", bytes(len(first))), ("garbage", bytes(rng.randrange(256) for _ in range(len(first)))),
        ("garbage after 0x5d", b"\x5d" + bytes(rng.randrange(256) for _ in range(len(first) - 1))),
        ("two streams", first + alone(b"16|1|1|1,")),
        ("two streams, second without comma", alone(b"16|1|1|1") + alone(b"16|2|2|2,")),
        ("two streams joining one frame", alone(b"16|1|1|1,16|2") + alone(b"|2|2,")),
        ("alone then xz", first + lzma.compress(b"16|1|1|1,")),
        ("second stream with a bad frame", first + alone(bad)),
        ("second stream broken after output", first + broken_stream(bad + noisy_frames(2000))),
        ("second stream cut", first + alone(bad)[:-3]),
        ("trailing zero byte", first + b"\x00"), ("trailing 0xff", first + b"\xff"),
        ("trailing 0xfd", first + b"\xfd"), ("trailing L", first + b"L"),
        ("trailing 13 zero bytes", first + bytes(13)), ("trailing garbage 0xe1...", first + b"\xe1" + bytes(40)),
        ("trailing random", first + bytes(rng.randrange(256) for _ in range(30))),
        ("second stream empty text", first + alone(b"")),
        ("only an empty stream", alone(b"")),
        ("empty stream then frames", alone(b"") + first),
        ("xz with stream padding", lzma.compress(good) + bytes(4)),
    ]:
        for mode in (0, 3):
            add(f"block mode {mode} {label}", assemble(mode=mode, block=block))
    # Decodable by osrparse, but declares a dictionary above the validator's memory limit.
    add("block 256 MiB dictionary", assemble(block=alone(good, dict_size=256 << 20)), exceeds_limits=True)


def verdict(data):
    try:
        replay = Replay.from_string(data)
    except Exception as error:  # every exception is a rejection
        return {"accepted": False, "error": f"{type(error).__name__}: {error}"[:200]}
    return {"accepted": True, "mode": replay.mode.value, "frames": len(replay.replay_data),
            "score_id": replay.replay_id,
            # What a job's `replay` shows (domain/replay/info.rs), as osrparse reads it.
            "player": replay.username or "", "beatmap_hash": replay.beatmap_hash or "",
            "replay_hash": replay.replay_hash or "", "mods": int(replay.mods),
            "counts": [replay.count_300, replay.count_100, replay.count_50, replay.count_geki,
                       replay.count_katu, replay.count_miss],
            "score": replay.score, "max_combo": replay.max_combo,
            # Seconds since 0001-01-01, whole: osrparse's float division is off by microseconds.
            "played_at_seconds": (replay.timestamp - datetime.min.replace(tzinfo=replay.timestamp.tzinfo))
                                 // timedelta(seconds=1)}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)

    # osrparse's writer stores a string's length in characters, not bytes: with non-ASCII
    # text it writes files it cannot read back.
    add("osrparse-written non-ASCII name", make_replay(GameMode.STD, 20, username="Éa日本🎵").pack())
    for name, data in valid_bases():
        add(f"{name}: as written", data)
        header_mutations(name, data)
    string_mutations()
    life_bar_mutations()
    timestamp_mutations()
    frame_text_cases()
    fuzz_frame_cases(150)
    block_cases()

    manifest = []
    for i, (name, data, exceeds_limits) in enumerate(cases):
        file = f"case_{i:04}.osr"
        with open(os.path.join(out_dir, file), "wb") as f:
            f.write(data)
        manifest.append({"file": file, "name": name, "exceeds_limits": exceeds_limits, **verdict(data)})
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    accepted = sum(case["accepted"] for case in manifest)
    print(f"{len(manifest)} cases ({accepted} accepted by osrparse) in {out_dir}")


if __name__ == "__main__":
    main()
