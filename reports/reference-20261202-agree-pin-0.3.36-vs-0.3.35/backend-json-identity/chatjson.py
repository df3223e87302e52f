"""Chat JSON the backend produces (parse_chat, chat_diffs per delta, schema-constrained text), greedy, for one
_core module given as a directory: to compare the module before and after json_compat.h byte for byte."""
import importlib.util
import json
import sys
from pathlib import Path

so = next(Path(sys.argv[1]).glob("_core*.so"))
spec = importlib.util.spec_from_file_location("_core", so)
core = importlib.util.module_from_spec(spec)
spec.loader.exec_module(core)
e = core.Engine(sys.argv[2], {"n_ctx": 2048, "n_threads": 2, "max_num_seqs": 1, "backend_dir": sys.argv[3]})
g = {"temperature": 0.0, "max_tokens": 40}
tools = json.dumps([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city, \"quoted\" \u00e9",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
cases = [
    ("plain", json.dumps([{"role": "user", "content": "What is the capital of France? \u00e9\u4e2d"}]), "", "auto", ""),
    ("schema", json.dumps([{"role": "user", "content": "Give a JSON object with a name."}]), "", "auto",
     json.dumps({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}, "required": ["name", "n"]})),
    ("tools", json.dumps([{"role": "user", "content": "What is the weather in Paris?"}]), tools, "required", ""),
    ("tools-auto", json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"}]), tools, "auto", ""),
]
out = {}
for name, msgs, tl, choice, schema in cases:
    r = e.submit_chat(msgs, tl, choice, schema, g, True)
    diffs = []
    while True:
        ev = r.next()
        if ev is None:
            break
        diffs.append(e.chat_diffs(r, False))
        if ev[0] != "delta":
            break
    diffs.append(e.chat_diffs(r, True))
    out[name] = {"text": r.text(), "parsed": e.parse_chat(r), "diffs": diffs}
print(json.dumps(out, indent=1, ensure_ascii=False))
