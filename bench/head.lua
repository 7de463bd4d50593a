-- wrk script for the registry benchmark (benches/registry.rs): manifest requests with
-- builder-monitor's Accept list, round robin over the paths listed one per line in the file named by
-- the first script argument; the second argument is the method (HEAD by default). Keep-alive is
-- wrk's default.
--
--   wrk -t2 -c16 -d15s -s bench/head.lua http://127.0.0.1:PORT -- paths.txt HEAD
--
-- Note: wrk 4.1 does not know that an answer to HEAD has no body, so it waits for the
-- Content-Length bytes that Distribution announces and completes no request; the benchmark detects
-- that and measures the HEAD ceiling with ApacheBench (ab -i -k) instead, and uses this script with
-- GET as a second reference.

local accept = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
    .. "application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json"
local paths = {}
local method = "HEAD"
local i = 0

function init(args)
  for line in io.lines(args[1]) do
    if line ~= "" then
      paths[#paths + 1] = line
    end
  end
  if args[2] then
    method = args[2]
  end
  -- Each thread starts at a different place in the list.
  i = math.random(#paths)
end

function request()
  i = i % #paths + 1
  return wrk.format(method, paths[i], { ["Accept"] = accept })
end
