import json, sys, statistics
from harness_plugins.llamacpp.bench import BackendArm
pn, gn = 128, 64
arm = BackendArm({"model": sys.argv[1], "threads": 2, "max_num_seqs": 1, "n_ctx": 256, "variant": "cpu"})
arm.warmup()
vals = [arm.measure(pn, gn, 1) for _ in range(7)]
arm.close()
print(json.dumps({"decode": [round(v["decode_tps"], 2) for v in vals], "ttft_ms": [round(1000*v["ttft_s"], 1) for v in vals]}))
