-- a million 4-element tables, each dropped at once
local function run(n)
  local keep
  for i = 0, n - 1 do keep = {i, i, i, i} end
  return keep[1]
end
print(run(1000000))
