-- wrk script for bench/load.py: POST /api/ai/queue with a small valid job.
-- The prompt carries the run's tag (env MMH3_BENCH_TAG) so the run's rows
-- can be found afterwards, and a counter so every request is distinct.
local tag = os.getenv("MMH3_BENCH_TAG") or "bench"
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  local body = string.format('{"prompt":"%s load %d","frames":5,"width":64,"height":64,"steps":3}', tag, n)
  return wrk.format(nil, nil, nil, body)
end
