"""Timing channel on a release: how often the patched table is the relatively slowest to scan, with untouched tables read directly (noshadow) and shadowed (shadow). Usage: python benchmarks/bench_timing.py RELEASE DB PAIRS SCANS noshadow,shadow"""
import sys, time, statistics
from pathlib import Path
import pipeline.env.episode as E
import pipeline.env.timing as T
from pipeline.env.release import Release
from pipeline.source.schema import load_schema, TABLE_NAMES

rel_dir, db = Path(sys.argv[1]), Path(sys.argv[2])
n_ep, scans = int(sys.argv[3]), int(sys.argv[4])
modes = sys.argv[5].split(",")
with Release.open(rel_dir, db, check_fingerprint=False) as rel:
    pairs = {}
    for t in rel.tasks():
        lab = rel.label(t.task_id)
        pairs.setdefault(lab.pair_id, {})[lab.condition] = t.task_id
    chosen = []
    for p in sorted(pairs):
        n, c = pairs[p].get("noise"), pairs[p].get("clean")
        patch = rel._patches.get(n)
        if patch and patch.touched_tables and c:
            chosen.append((c, n, patch.touched_tables[0]))
    chosen = chosen[:n_ep]
    schema = load_schema()
    tables = {t: schema[t].column_names[0] for t in sorted({x[2] for x in chosen})}
    print(len(chosen), "pairs;", len(tables), "tables", list(tables))
    for mode in modes:
        E.SHADOW_TABLES = TABLE_NAMES if mode == "shadow" else ()
        probes, opens = [], []
        t0 = time.perf_counter()
        for c, n, table in chosen:
            for tid, noisy in ((c, False), (n, True)):
                s = time.perf_counter()
                with rel.episode(tid) as ep:
                    opens.append(time.perf_counter() - s)
                    probes.append(T.Probe(tid, table, noisy, T.probe_episode(ep.gateway.run, tables, scans)))
        print(f"[{mode}] probe elapsed {time.perf_counter() - t0:.1f}s, episode open median {statistics.median(opens)*1000:.1f} ms")
        base = {t: statistics.median(p.seconds[t] for p in probes) for t in tables}
        for cond in (True, False):
            sel = [p for p in probes if p.noisy == cond]
            hits = sum(T.pick(p.seconds, base) == p.patched for p in sel)
            print(f"[{mode}]", "noisy" if cond else "clean", f"hits {hits}/{len(sel)} chance {1/len(tables):.3f} bound {T.binomial_upper(len(sel), 1/len(tables))}")
        clean = [p for p in probes if not p.noisy]
        print(f"[{mode}] clean full-scan ms:", {t: round(statistics.median(p.seconds[t] for p in clean)*1000, 2) for t in tables})
        # the reference programs of every clean task, 3 runs each
        ref = 0.0
        for task in rel.tasks():
            lab = rel.label(task.task_id)
            if lab.condition != "clean":
                continue
            with rel.episode(task.task_id) as ep:
                ref += T.scan_seconds(ep.gateway.run, lab.reference_sql, 3)
        print(f"[{mode}] clean reference programs total median-of-3 seconds: {ref:.3f}")
