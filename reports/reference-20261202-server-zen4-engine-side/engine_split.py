"""From a bench results.json: per block, B/A of the client-side and of the engine-side figures, and
each arm's client/engine ratio (delivery)."""
import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
rows = {}
for s in d["samples"]:
    e = s.get("extra", {})
    if "engine_decode_tps" not in e: continue
    rows.setdefault((s["concurrency"], s["block"]), {})[s["arm"]] = (s["decode_tps"], e["engine_decode_tps"], s["ttft_s"], e["engine_ttft_s"])
for c in sorted({k[0] for k in rows}):
    r_client, r_engine, dA, dB, tA, tB = [], [], [], [], [], []
    for (cc, b), v in sorted(rows.items()):
        if cc != c or len(v) < 2: continue
        A, B = v["A"], v["B"]
        r_client.append(B[0] / A[0]); r_engine.append(B[1] / A[1])
        dA.append(A[0] / A[1]); dB.append(B[0] / B[1]); tA.append(A[2] - A[3]); tB.append(B[2] - B[3])
    g = st.geometric_mean
    print(f"c={c} blocks={len(r_client)}: decode B/A client {g(r_client):.3f}  engine-side {g(r_engine):.3f}; "
          f"client/engine decode A {g(dA):.3f} B {g(dB):.3f}; TTFT client-engine ms A {1e3*st.median(tA):.2f} B {1e3*st.median(tB):.2f}")
