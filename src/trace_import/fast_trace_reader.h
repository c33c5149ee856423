// The fast path of read_raw_trace (trace_reader.h): simdjson over framed batches of
// trace events, at several times the speed of the reference reader (nlohmann's SAX
// parser over BoundedJson), with the same result for every trace it accepts.
//
// How it reads. A framer streams the file through a window of kWindowBytes (refilled
// from TraceBytes, never the whole file) and parses the document's outer structure
// itself: the top-level object (or the bare array form), its keys, and the traceEvents
// array's brackets and commas. Inside the array it looks only for brackets outside
// strings, 64 bytes at a time (bit masks for quotes, backslashes and brackets; a prefix
// XOR gives the bytes inside strings), which is enough to find where each event ends.
// The complete events form batches of about 256 KiB: a batch's text, wrapped in '[' ']',
// is parsed by simdjson's DOM parser, which validates all of it (grammar, numbers,
// escapes, UTF-8, control characters: simdjson and nlohmann agree on what is JSON), and
// its tree is walked, skipping what the semantics do not use. The walk drives
// TraceSemantics (trace_semantics.h), shared with the reference reader. Numbers that are
// not integer literals are read from their decimal text, as the reference reader does
// (decimal_us_to_ns: a double would lose the nanoseconds of an epoch timestamp): the
// framer records where each event begins, and the text of a value is found from there
// by position (RawText). Other top-level members are parsed the same way, one at a time,
// as {"key": value}.
//
// Long events. An event longer than kMaxFastEventBytes (or one that may hold a number
// longer than the reference reader's bound) goes through a slow lane: the reference
// reader's tokenizer (BoundedJson, nlohmann's SAX parser) streamed from the window, into
// the same semantics; its strings are cut at 64 KiB as they always were, and the fast
// lane goes on after it. A 2 GiB string costs its reading time, not its size.
//
// Bounds. What it holds at once is the window, one batch (about 256 KiB, at most
// kWindowBytes) and simdjson's buffers for it (about 20 bytes a byte), or the slow
// lane's BoundedJson, whatever the file's size. A top-level value other than traceEvents
// larger than kMaxFastEventBytes, nesting beyond kMaxJsonDepth, and anything else it does
// not take (a key with escapes, an integer beyond 64 bits) make it give up, and so does
// every error: invalid JSON, a wrong type, a truncated file. Giving up (returning false)
// costs nothing but the time spent: the caller rewinds the bytes and reads the file with
// the reference reader, which takes every input with its own bounds (BoundedJson) and
// reports every error exactly as before, with its byte offset.
#pragma once

#include <cstddef>
#include <streambuf>
#include <string_view>

#include "trace_import/trace_bytes.h"
#include "trace_import/trace_reader.h"

namespace tandem {

inline constexpr std::size_t kWindowBytes = 1 << 20;         // 1 MiB
inline constexpr std::size_t kMaxFastEventBytes = 64 << 10;  // 64 KiB

// Reads `bytes` into `out` (names into `names`); false if it gave up, and then `out`
// and `bytes` are in no particular state (names interned so far stay interned).
bool read_raw_trace_fast(TraceBytes& bytes, std::string_view source, NameTable& names,
                         RawTrace& out);

class TraceSemantics;
// The reference reader's tokenizer (trace_reader.cpp) on one JSON value, which must end
// where `bytes` ends: BoundedJson, then nlohmann's SAX parser, into `semantics`. The fast
// reader's slow lane. Throws UsageError.
void read_value_with_reference(std::streambuf& bytes, TraceSemantics& semantics);

}  // namespace tandem
