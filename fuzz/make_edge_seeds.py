#!/usr/bin/env python3
# Writes the hand-made edge cases of fuzz/seeds/ (edge-*.ntrace): `python3 make_edge_seeds.py seeds`.
# Hand-made edge cases: uncompressed sections (flag 0), valid CRCs.
import json, struct, zlib, sys, os
out = sys.argv[1]
def header(w="numatrace seed"):
    return b"NUMATRCE" + struct.pack("<HHBBH", 1, 0, 1, 0, len(w)) + w.encode()
def sect(kind, raw, flags=0):
    return b"SECT" + struct.pack("<IIIII", kind, flags, len(raw), len(raw), zlib.crc32(raw)) + raw
snap = {"mono_ns":0,"span_ns":0,"consistent":True,"self_tgid":99,"tasks":[],"detail":True,"vmas":{},
 "counters":[0]*12,"migrate_latency":[],"fault_pages":[],"migrate_matrix":[],"migrated_pages":[],
 "node_faults":[],"region_faults":[],"vmstat_lo":{},"vmstat_hi":{},"in_flight":{"start":0,"end":0},
 "program_misses":{},"events":{},"undecodable":0,"evicted":0,"nodes":[]}
M = 2**64-1
def task(pid, tgid, **c):
    t = {"pid":pid,"tgid":tgid,"comm":"w\u001b[31m","exited":False,"cgroup_id":5,"cgroup":"/a/b","first_ns":1}
    t.update(c); return t
machine = {"hostname":"h","nodes":[{"node":0,"cpus":"0-1","distances":[10,20]},{"node":1,"cpus":"2","distances":[20,10]}],
           "command_line":["numatrace","record"],"started_unix_s":1.7e9,
           "window":{"duration_s":1.0,"consistent":True,"scope":"system","comm_filter":None,"cgroup_filter":None}}
def base(m=machine):
    return header() + sect(1, json.dumps(m).encode()) + sect(2, b"[]") + sect(3, json.dumps(snap).encode())
events = [
 {"kind":"skip_vma","ts_ns":10,"pid":1,"tgid":1,"cpu":0,"vm_start":4096,"vm_end":8192,"reason":"shared_ro"},
 {"kind":"placement","ts_ns":11,"pid":1,"tgid":1,"cpu":0,"what":"swap","src_nid":0,"dst_nid":1,"dst_pid":2},
 {"kind":"migrate_pages","ts_ns":12,"pid":1,"tgid":1,"cpu":0,"succeeded":M,"failed":M,"thp_succeeded":1,"thp_failed":0},
 {"kind":"task_exit","ts_ns":13,"pid":2,"tgid":1,"cpu":1},
 {"kind":"vma_scan","ts_ns":14,"pid":1,"tgid":1,"cpu":0,"vm_start":0,"vm_end":M,"pte_updates":M},
 {"kind":"scan_call","ts_ns":M,"dur_ns":M,"pid":1,"tgid":1,"cpu":0},
 {"kind":"migration","ts_ns":16,"dur_ns":5,"pid":4194303,"tgid":1,"cpu":0,"src":None,"dst":1,"migrated":True},
 {"kind":"stall","ts_ns":0,"dur_ns":5,"pid":1,"tgid":1,"cpu":0},
 {"kind":"from_the_future","x":[1,2,{"y":None}]},
]
big = dict(snap, mono_ns=2_000_000_000, tasks=[task(1,1,hint_faults={"faults":M,"local":M-1}, scan={"calls":M,"time_ns":M,"task_runtime_ns":1}),
   task(2,1,hint_faults={"faults":M}, skipped_vmas={"shared_ro":M,"other":M}, skipped_vmas_total=M),
   task(99,99,hint_faults={"faults":3})],
   vmas={"1":[{"start":"0x1000","end":"0x2000","start_addr":4096,"end_addr":8192,"pte_updates":M,"calls":M,"mapping":"[anon:x]",
      "pid_inactive":{"skips":M,"over_threads":1,"at_threshold":1,"max_gap":M,"max_gap_threads":1},"scan_times_ns":[1,M]}]},
   counters=[M]*12, migrate_latency=[M]*64, fault_pages=[M]*11, migrate_matrix=[M]*40, migrated_pages=[M]*20, node_faults=[M]*24,
   region_faults=[{"tgid":1,"scan_seq":1,"region":0,"faults":M},{"tgid":1,"scan_seq":2,"region":0,"faults":M}],
   vmstat_lo={"numa_hint_faults":M}, vmstat_hi={"numa_hint_faults":M}, program_misses={"a":M,"b":M}, undecodable=M, evicted=M)
end = {"window":machine["window"],"exit_code":None,"events_written":M,"events_over_max_size":M,"samples_over_max_size":M,
       "events_not_kept":M,"bytes":M,"ended_unix_s":1e300}
files = {
 "edge-u64-max-counts.ntrace": base() + sect(4, json.dumps(events).encode()) + sect(5, json.dumps(big).encode())
      + sect(5, json.dumps(dict(big, mono_ns=1)).encode()) + sect(6, json.dumps(big).encode()) + sect(7, json.dumps(end).encode()),
 "edge-header-only.ntrace": header(),
 "edge-empty-sections.ntrace": base() + sect(4, b"[]") + sect(4, b"[]", 0) + sect(999, b"") + sect(5, json.dumps(snap).encode()),
 "edge-cut-mid-section.ntrace": (base() + sect(4, json.dumps(events).encode()))[:-7],
 "edge-deep-json.ntrace": header() + sect(1, b'{"command_line":' + b"[" * 200 + b"]" * 200 + b"}"),
 "edge-repeated-tasks.ntrace": base() + sect(5, json.dumps(dict(snap, tasks=[task(1,1)]*100)).encode()) * 3,
 "edge-long-strings.ntrace": base(dict(machine, hostname="h"*300)) ,
 "edge-no-end-newer-minor.ntrace": (header().replace(struct.pack("<HH",1,0), struct.pack("<HH",1,7),1) + sect(1, json.dumps(machine).encode())
      + sect(2, b"[]") + sect(3, json.dumps(dict(snap, tasks=[task(1,1,hint_faults={"faults":5})])).encode())
      + sect(5, json.dumps(dict(snap, mono_ns=5, tasks=[task(1,1,hint_faults={"faults":2})])).encode())),
}
for n, b in files.items():
    open(os.path.join(out, n), "wb").write(b)
