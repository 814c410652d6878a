"""Profile chunk 0 of int5 eps 4 seed 0 through the release path, with the variant set by argv[1]."""
import sys, time, cProfile, pstats
import numpy as np
sys.path.insert(0, "benchmarks")
import sds_matrix as sm
from dpsynth.methods.sds import chunked, method as mm, refit, update
from dpsynth.methods import METHODS
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.rows.encoding import EncodedTable

variant = sys.argv[1]
chunked.SHARE_ALL_TABLES = variant != "main"
mm.CHUNK_REWEIGHT_LENGTHS = None if variant == "all" else (2,)
mm.CHUNK_PAIRS_AGAIN = variant == "B"
timers = {}
def timed(name, f):
    def g(*a, **k):
        t = time.process_time(); r = f(*a, **k); timers[name] = timers.get(name, 0.0) + time.process_time() - t
        return r
    return g
mm.honour_tables = timed("honour_tables", mm.honour_tables)
mm.update_tables = timed("update_tables", mm.update_tables)
mm._rake_to_one_way = timed("_rake_to_one_way", mm._rake_to_one_way)
mm._sample_complete = timed("_sample_complete", mm._sample_complete)
table = sm.interaction_table(5)
cls = METHODS["sds"]; m = cls(cls.params_type())
budget = Budget(epsilon=4.0, delta=sm.DELTA)
ss = np.random.SeedSequence([0, 17]); r_measure, r_synth, _ = (np.random.default_rng(s) for s in ss.spawn(3))
meas = m.measure(EncodedTable(schema=table.schema, codes=table.codes), Ledger(budget, m.plan(table.schema, budget)), r_measure)
s = m.sampler(meas, table.schema, None, r_synth)
print("chunks", s.sizes, "tables in share", len(s._tables))
timers.clear()
pr = cProfile.Profile(); t0 = time.process_time(); pr.enable()
s._next_part()
pr.disable()
print(variant, "chunk 0 CPU s", round(time.process_time() - t0, 1), {k: round(v, 1) for k, v in timers.items()})
pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
