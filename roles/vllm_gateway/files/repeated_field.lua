-- The gateway routes and checks a request by the first `model` (and n, max_tokens, ...) in its JSON body, as
-- HAProxy's json_query reads it; vLLM's JSON parser keeps the last. A body that names a top-level field twice could
-- so pass the checks with one value and be served with another: this action names such a field, and the gateway
-- refuses the request. A top-level name written with an escape ("mod\u0065l") is reported too, since a parser reads
-- it as the plain name. Loaded by HAProxy (lua-load); run by itself (lua5.3), it is a module for the tests.
local fields = {}

-- Return the position just after the JSON string whose opening quote is at `start`, and its raw text.
local function string_end(body, start)
  local from = start + 1
  while true do
    local at = body:find('["\\]', from)
    if not at then
      return nil
    end
    if body:sub(at, at) == "\\" then
      from = at + 2
    else
      return at + 1, body:sub(start + 1, at - 1)
    end
  end
end

-- Return the first top-level field name of a JSON object that is repeated or escaped, or nil.
function fields.repeated(body)
  local seen, depth, expect_name = {}, 0, false
  local at = body:find("[{}%[%],\"]")
  while at do
    local char = body:sub(at, at)
    local after = at + 1
    if char == '"' then
      local stop, text = string_end(body, at)
      if not stop then
        return nil
      end
      if depth == 1 and expect_name then
        if seen[text] or text:find("\\", 1, true) then
          return text
        end
        seen[text], expect_name = true, false
      end
      after = stop
    elseif char == "{" or char == "[" then
      depth = depth + 1
      expect_name = depth == 1 and char == "{"
    elseif char == "}" or char == "]" then
      depth = depth - 1
    elseif depth == 1 then
      expect_name = true
    end
    at = body:find("[{}%[%],\"]", after)
  end
  return nil
end

if core then
  core.register_action("vllm_fleet_repeated_field", { "http-req" }, function(txn)
    local name = fields.repeated(txn.sf:req_body() or "")
    if name then
      txn:set_var("txn.repeated_field", name)
    end
  end)
end

return fields
