-- table.sort (C) sorts 100000 ints, calling a Lua comparator each time
local n, t, x = 100000, {}, 12345
for i = 1, n do
  x = (x * 1103515245 + 12345) % 2147483648
  t[i] = x % 1000000
end
table.sort(t, function(a, b) return a < b end)
print(t[1], t[n])
