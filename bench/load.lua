-- wrk script for bench/run: POST /v1/render with one replay as multipart/form-data.
--   BENCH_REPLAY     the .osr file to send (required)
--   BENCH_UNIQUE_IP  "1": each request has its own CF-Connecting-IP (10.t.h.l), so the per-IP
--                    limits and the duplicate check never refuse; otherwise one fixed client
-- Prints one `RESULT key=value …` line that bench/run parses.

local path = assert(os.getenv("BENCH_REPLAY"), "BENCH_REPLAY is not set")
local file = assert(io.open(path, "rb"))
local replay = file:read("*a")
file:close()

local boundary = "osurender-bench-boundary"
wrk.method = "POST"
wrk.path = "/v1/render"
wrk.headers["Content-Type"] = "multipart/form-data; boundary=" .. boundary
wrk.headers["CF-Connecting-IP"] = "198.51.100.1"
wrk.body = table.concat({
  "--", boundary, "\r\n",
  'Content-Disposition: form-data; name="replay"; filename="play.osr"\r\n',
  "Content-Type: application/octet-stream\r\n\r\n", replay, "\r\n",
  "--", boundary, "\r\n",
  'Content-Disposition: form-data; name="skin"\r\n\r\nDefault\r\n',
  "--", boundary, "--\r\n",
})

if os.getenv("BENCH_UNIQUE_IP") == "1" then
  local threads = 0
  function setup(thread)
    thread:set("tid", threads)
    threads = threads + 1
  end

  local sent = 0
  function request()
    sent = sent + 1
    wrk.headers["CF-Connecting-IP"] = string.format(
      "10.%d.%d.%d", tid % 256, math.floor(sent / 256) % 256, sent % 256)
    return wrk.format()
  end
end

function done(summary, latency, requests)
  io.write(string.format(
    "RESULT requests=%d duration_us=%d non_2xx=%d connect_errors=%d read_errors=%d "
      .. "timeouts=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, summary.errors.status, summary.errors.connect,
    summary.errors.read, summary.errors.timeout, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency.max))
end
