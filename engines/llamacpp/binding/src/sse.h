// A streamed request written to its HTTP client as server-sent events, in C++.
//
// harness serve's engine worker gets the client's socket (a duplicate of the server's file
// descriptor, passed over a Unix socket) once the server has written the response head and the
// stream's opening event. From there each delta is one write of one event: `prefix + value +
// suffix`, the value a JSON string (completions) or a chat delta object (chat), in HTTP/1.1 chunked
// framing when the response is chunked. No Python runs per token, in the worker or in the server;
// the server writes the last events once the worker says the stream ended.
#pragma once

#include <optional>
#include <string>

#include "engine.h"

namespace harness {

struct SseTarget {
    int fd = -1;                   // the client's socket (non-blocking: the server's event loop set it so)
    std::string prefix, suffix;    // each event is prefix + JSON value + suffix ("data: {...", "...}\n\n")
    bool chunked = true;           // wrap each event in an HTTP/1.1 chunk
    double write_timeout_s = 30.0; // an event the client does not take within this long: "slow"
};

struct PumpResult {
    // "done": the request ended (`end` holds its last event: Done or Error); "gone": the client
    // closed or reset the connection; "slow": an event could not be written within the write
    // timeout; "cancelled": the request was cancelled while a write waited. In all but "done"
    // the request is cancelled, and an event may have been written in part.
    std::string outcome;
    std::optional<Event> end;
    size_t events = 0;             // events written whole
};

// Write each of `req`'s deltas to the client until the request ends or the client cannot be
// written to. While nothing is queued the engine's decode thread writes each delta itself at the end
// of its step (Request::set_writer: a send that does not wait); when the client's socket is full (or
// the client gone) this thread is woken, writes what was left and the deltas queued since (reading
// them as Request::next, every one already there in one event, bounded by the write timeout), and
// hands back to the decode thread once it has caught up. chat: the deltas are the engine's partial chat
// parse (chat_diff_list), the final one included; else each text delta as a JSON string.
PumpResult pump_sse(const Engine & engine, Request & req, const SseTarget & target, bool chat);

}  // namespace harness
