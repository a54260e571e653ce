"""The simulator's event kinds: dispatch-table indices and their order at equal times.

At one timestamp, what frees or ends capacity (a job finishing, a node gone, a checkpoint
written) comes first, then what adds it (a node ready) and notices, then arrivals, and the
scheduling pass and the autoscaler scan last, so that each sees everything that happened at
that time.
"""

from __future__ import annotations

ARRIVAL, FINISH, READY, NOTICE, GONE, SCAN, PASS, SAMPLE, CKPT_DONE, DEADLINE, FAIL = range(11)
NAMES = ("arrival", "finish", "node ready", "spot notice", "node gone", "autoscaler scan",
         "scheduling pass", "sample", "checkpoint written", "deadline check", "GPU failure")
PRIO = {FINISH: 0, GONE: 0, CKPT_DONE: 0, READY: 1, NOTICE: 1, FAIL: 1, ARRIVAL: 2, DEADLINE: 3,
        PASS: 5, SCAN: 6, SAMPLE: 9}
# events that do not keep a run alive: when only these are left, nothing else can happen
PASSIVE = (SAMPLE, DEADLINE, FAIL)
