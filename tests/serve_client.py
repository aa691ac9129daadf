#!/usr/bin/env python3
"""serve_client.py: a KServe v2 client for tests/test_serve.sh (Python's
standard library only; traffic to 127.0.0.1 only).

  serve_client.py dtypes PORT MODEL           every dtype, JSON and binary, both ways
  serve_client.py load PORT RILL MODEL.vmasm N CONC
                                              N requests of 1..6 rows from CONC clients at
                                              once; each answer's rows against `rill run`
                                              of the same rows; batching seen in /metrics
  serve_client.py shapes PORT MODEL N CONC     f32[B,S] requests of several S at once: each
                                              answer right, runs that joined requests
  serve_client.py queue PORT MODEL N          N slow requests at once: 200s and 503s
                                              (with Retry-After), nothing else
  serve_client.py fuzz PORT COUNT SECONDS     mangled requests, fields and headers (FUZZ_SEED); the server
                                              answers each with a status or closes, and
                                              still answers after
  serve_client.py idle PORT SECONDS            half a request, or none: closed in time
  serve_client.py maxconn PORT N              --max-connections=N: one more is closed at once
  serve_client.py compare PORT RILL NAME PATH  a fixed-shape model's answer against rill run
  serve_client.py drain PORT PID MODEL N      N slow requests, SIGTERM while they run:
                                              every one answered 200, then the port closed
  serve_client.py bigload PORT MODEL N CONC W  binary requests of 1..4 rows of W floats at once
                                              (batches of megabytes): each answer right, runs of
                                              more than 4 rows seen
  serve_client.py pieces PORT MODEL W         on one connection, binary requests of W floats a row:
                                              one sent in pieces, one larger than a connection's
                                              first buffer, two sent together, then 24 more: each
                                              answer right and in order
  serve_client.py limit PORT MODEL LIMIT       a body of exactly --max-body-bytes=LIMIT is served,
                                              one byte more is 413
  serve_client.py generate PORT RILL DIR N CONC
                                              N generations (streamed or not, greedy or sampled)
                                              from CONC clients at once, each one's tokens
                                              against `rill llm`'s
  serve_client.py generate-errors PORT MODEL Q 400s, 503s past a queue of Q, a client leaving
  serve_client.py genfuzz PORT MODEL COUNT SECONDS
                                              mangled generate requests (FUZZ_SEED)
Each mode exits 0 when its checks pass and prints what failed otherwise.
"""
import http.client
import json
import math
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HOST = "127.0.0.1"

FMT = {"BOOL": "?", "INT8": "b", "UINT8": "B", "INT32": "i", "INT64": "q", "FP16": "e", "FP32": "f", "FP64": "d"}
SIZE = {"BOOL": 1, "INT8": 1, "UINT8": 1, "INT32": 4, "INT64": 8, "FP16": 2, "BF16": 2, "FP32": 4, "FP64": 8}


def pack(dt, values):
    if dt == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return struct.pack("<%d%s" % (len(values), FMT[dt]), *values)


def unpack(dt, data):
    n = len(data) // SIZE[dt]
    if dt == "BF16":
        return [struct.unpack("<f", b"\0\0" + data[2 * i:2 * i + 2])[0] for i in range(n)]
    return list(struct.unpack("<%d%s" % (n, FMT[dt]), data))


def request(port, method, path, body=None, headers=None, conn=None, timeout=60):
    c = conn or http.client.HTTPConnection(HOST, port, timeout=timeout)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    if not conn:
        c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def infer_body(inputs, binary_in=False, outputs=None, binary_out=False, rid=None):
    """inputs: [(name, datatype, shape, flat values)]"""
    req = {"inputs": []}
    if rid is not None:
        req["id"] = rid
    blobs = []
    for name, dt, shape, vals in inputs:
        t = {"name": name, "datatype": dt, "shape": shape}
        if binary_in:
            b = pack(dt, vals)
            t["parameters"] = {"binary_data_size": len(b)}
            blobs.append(b)
        else:
            t["data"] = vals
        req["inputs"].append(t)
    if outputs is not None:
        req["outputs"] = [{"name": o, "parameters": {"binary_data": binary_out}} for o in outputs]
    elif binary_out:
        req["parameters"] = {"binary_data_output": True}
    head = json.dumps(req).encode()
    headers = {"Content-Type": "application/json"}
    if binary_in:
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}
    return head + b"".join(blobs), headers


def parse_response(headers, data):
    """{name: (datatype, shape, flat values)} and the JSON"""
    jl = int(headers.get("inference-header-content-length", len(data)))
    doc = json.loads(data[:jl])
    at = jl
    out = {}
    for o in doc.get("outputs", []):
        if "data" in o:
            vals = o["data"]
            if o["datatype"] in ("FP32", "FP16"):  # the digits printed read back to the dtype's value
                vals = unpack(o["datatype"], pack(o["datatype"], vals))
        else:
            n = o["parameters"]["binary_data_size"]
            vals = unpack(o["datatype"], data[at:at + n])
            at += n
        out[o["name"]] = (o["datatype"], o["shape"], vals)
    if at != len(data):
        raise ValueError("%d bytes after the outputs" % (len(data) - at))
    return out, doc


def infer(port, model, inputs, conn=None, **kw):
    body, headers = infer_body(inputs, **kw)
    st, h, data = request(port, "POST", "/v2/models/%s/infer" % model, body, headers, conn=conn)
    if st != 200:
        return st, h, json.loads(data) if data.startswith(b"{") else data
    return st, h, parse_response(h, data)[0]


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def finish():
    print("%s: %d failed" % (sys.argv[1], len(failures)))
    sys.exit(1 if failures else 0)


# ---- dtypes: the fixture of test_serve.sh, @main(a: i8, b: u8, c: i32, d: i64,
# e: f16, f: bf16, g: f64, h: bool, k: f32), each [B,2] ----
def mode_dtypes(port, model):
    rows = 3
    ins = [("a", "INT8", [-5, 0, 7, 100, -128, 1]), ("b", "UINT8", [0, 1, 2, 100, 127, 9]),
           ("c", "INT32", [-70000, 3, 0, 5, 2000000000, -2]), ("d", "INT64", [1, -2, 3, 1 << 40, -(1 << 40), 0]),
           ("e", "FP16", [0.5, -1.25, 3.0, 100.0, -0.125, 0.0]), ("f", "BF16", [1.0, 2.5, -3.0, 128.0, 0.5, -0.25]),
           ("g", "FP64", [1e-300, 0.1, -2.0, 3.5, 1e300, 0.0]), ("h", "BOOL", [True, False, False, True, True, False]),
           ("k", "FP32", [0.1, -0.2, 3.5, 1e30, -7.0, 0.0])]
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    want = {"output_0": ("INT8", [v + 1 for v in ins[0][2]]), "output_1": ("UINT8", [v * 2 for v in ins[1][2]]),
            "output_2": ("INT32", [v - 3 for v in ins[2][2]]), "output_3": ("INT64", [v + v for v in ins[3][2]]),
            "output_4": ("FP16", [v * 2 for v in ins[4][2]]), "output_5": ("BF16", [v + 1 for v in ins[5][2]]),
            "output_6": ("FP64", [v * 0.5 for v in ins[6][2]]), "output_7": ("BOOL", [not v for v in ins[7][2]]),
            "output_8": ("FP32", [-f32(v) for v in ins[8][2]])}
    inputs = [(n, dt, [rows, 2], v) for n, (dt, v) in zip("abcdefghk", [(x[1], x[2]) for x in ins])]
    for bin_in in (False, True):
        for bin_out in (False, True):
            st, h, out = infer(port, model, inputs, binary_in=bin_in, binary_out=bin_out)
            what = "dtypes binary_in=%s binary_out=%s" % (bin_in, bin_out)
            check(st == 200, "%s: status %s %s" % (what, st, out))
            if st != 200:
                continue
            check(("inference-header-content-length" in h) == bin_out, what + ": Inference-Header-Content-Length")
            for name, (dt, vals) in want.items():
                got = out.get(name)
                check(got is not None and got[0] == dt and got[1] == [rows, 2], "%s: %s is %s" % (what, name, got and got[:2]))
                if got:
                    gv = [bool(x) for x in got[2]] if dt == "BOOL" else got[2]
                    check(gv == vals, "%s: %s = %s, want %s" % (what, name, gv, vals))
    # nested data reads as flat
    nested = [(n, dt, shape, [v[0:2], v[2:4], v[4:6]]) for n, dt, shape, v in inputs]
    st, h, out = infer(port, model, nested)
    check(st == 200 and out["output_3"][2] == want["output_3"][1], "dtypes: nested data")
    # only the outputs asked for, in that order, one binary
    st, h, out = infer(port, model, inputs, outputs=["output_7", "output_0"], binary_out=True)
    check(st == 200 and list(out) == ["output_7", "output_0"], "dtypes: outputs asked for: %s" % (list(out) if st == 200 else out))
    # wrong values for the dtype
    for name, dt, bad in (("a", "INT8", 128), ("b", "UINT8", -1), ("c", "INT32", 1.5), ("h", "BOOL", 2), ("k", "FP32", "x")):
        ins2 = [(n, d, s, ([bad] + v[1:]) if n == name else v) for n, d, s, v in inputs]
        st, h, out = infer(port, model, ins2)
        check(st == 400 and "error" in out, "dtypes: %s value %r: status %s %s" % (dt, bad, st, out))
    finish()


# ---- load ----
def npy_write(path, dt, shape, vals):
    code = {"FP32": "<f4", "INT64": "<i8"}[dt]
    head = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (code, "".join("%d, " % s for s in shape))
    head = head.ljust(118 - 10) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + pack(dt, vals))


def npy_read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<H", data[8:10])[0]
    head = data[10:10 + n].decode()
    dt = {"'<f4'": "FP32", "'<i8'": "INT64"}[head.split("'descr': ")[1].split(",")[0]]
    return dt, unpack(dt, data[10 + n:])


def local_run(rill, model, rows, vals, tmp, i):
    inp = os.path.join(tmp, "in%d.npy" % i)
    npy_write(inp, "FP32", [rows, 4], vals)
    o0, o1 = os.path.join(tmp, "o%d_0.npy" % i), os.path.join(tmp, "o%d_1.npy" % i)
    subprocess.run([rill, "run", model, "--device=cpu", "--graph=off", "--input=@" + inp, "--output=@" + o0, "--output=@" + o1],
                   check=True, capture_output=True)
    return npy_read(o0)[1], npy_read(o1)[1]


def metric(port, name, labels):
    st, h, data = request(port, "GET", "/metrics")
    for line in data.decode().splitlines():
        if line.startswith(name + "{") and all(l in line for l in labels):
            return float(line.split()[-1])
    return None


def run_clients(port, n, conc, one):
    """answers of requests 0..n-1, one(conn, i) each, from conc clients with a connection each"""
    answers = [None] * n
    nxt = [0]
    lock = threading.Lock()

    def client():
        conn = http.client.HTTPConnection(HOST, port, timeout=60)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n:
                break
            try:
                answers[i] = one(conn, i)
            except Exception as e:  # noqa: BLE001
                answers[i] = (-1, {}, str(e))
                conn = http.client.HTTPConnection(HOST, port, timeout=60)
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(conc)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return answers


def mode_load(port, rill, model_path, n, conc):
    model = os.path.basename(model_path).rsplit(".", 1)[0]
    rnd = random.Random(7)
    reqs = []
    for i in range(n):
        rows = rnd.randint(1, 6)
        reqs.append((rows, [rnd.randint(-64, 64) / 16.0 for _ in range(rows * 4)], rnd.random() < 0.5))

    def one(conn, i):
        rows, vals, binary = reqs[i]
        return infer(port, model, [("x", "FP32", [rows, 4], vals)], conn=conn, binary_in=binary, binary_out=not binary, rid="r%d" % i)

    t = time.time()
    answers = run_clients(port, n, conc, one)
    print("load: %d requests from %d clients in %.2f s" % (n, conc, time.time() - t))
    # the same rows run locally, several requests' rows to a run (up to 64: rows do not mix in this model)
    with tempfile.TemporaryDirectory() as tmp:
        i = 0
        while i < n:
            j, total = i, 0
            while j < n and total + reqs[j][0] <= 64:
                total += reqs[j][0]
                j += 1
            y, c = local_run(rill, model_path, total, sum((reqs[k][1] for k in range(i, j)), []), tmp, i)
            row = 0
            for k in range(i, j):
                rows = reqs[k][0]
                st, h, out = answers[k]
                if st != 200:
                    check(False, "load: request %d: status %s %s" % (k, st, out))
                else:
                    wy, wc = y[3 * row:3 * (row + rows)], c[row:row + rows]
                    check(out["output_0"][1] == [rows, 3] and out["output_0"][2] == wy, "load: request %d: output_0 %s, want %s" % (k, out["output_0"], wy))
                    check(out["output_1"][1] == [rows] and out["output_1"][2] == wc, "load: request %d: output_1 %s, want %s" % (k, out["output_1"], wc))
                row += rows
            i = j
    runs = metric(port, "rill_serve_batch_requests_count", ['model="%s"' % model])
    alone = metric(port, "rill_serve_batch_requests_bucket", ['model="%s"' % model, 'le="1"'])
    print("load: %s runs, %s of them one request alone" % (runs, alone))
    check(runs is not None and alone is not None and runs > alone, "load: no run joined two requests")
    check(runs is not None and runs < n + 64, "load: more runs than requests")
    finish()


# ---- two shape variables: requests join only with those of the same S ----
def mode_shapes(port, model, n, conc):
    """@main(x: f32[B,S]) -> 2x: n requests of B in 1..3 and S in 1..4 from conc clients"""
    rnd = random.Random(5)
    reqs = []
    for i in range(n):
        b, s_ = rnd.randint(1, 3), rnd.randint(1, 4)
        reqs.append((b, s_, [float(rnd.randint(-100, 100)) for _ in range(b * s_)]))

    def one(conn, i):
        b, s_, vals = reqs[i]
        return infer(port, model, [("x", "FP32", [b, s_], vals)], conn=conn)

    answers = run_clients(port, n, conc, one)
    for i, (b, s_, vals) in enumerate(reqs):
        st, h, out = answers[i]
        check(st == 200 and out["output_0"][1] == [b, s_] and out["output_0"][2] == [2 * v for v in vals],
              "shapes: request %d (B=%d, S=%d): %s %s" % (i, b, s_, st, out))
    runs = metric(port, "rill_serve_batch_requests_count", ['model="%s"' % model])
    alone = metric(port, "rill_serve_batch_requests_bucket", ['model="%s"' % model, 'le="1"'])
    print("shapes: %s runs, %s of them one request alone" % (runs, alone))
    check(runs is not None and alone is not None and runs > alone, "shapes: no run joined two requests")
    finish()


# ---- queue ----
def slow_requests(port, model, n, loops, meanwhile=None):
    """n requests at once to the slow model (each looping `loops` times); meanwhile() runs while they do"""
    answers = [None] * n

    def one(i):
        try:
            answers[i] = infer(port, model, [("x", "FP32", [64], [0.5] * 64), ("n", "INT64", [], [loops])])
        except Exception as e:  # noqa: BLE001
            answers[i] = (-1, {}, str(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    if meanwhile:
        meanwhile()
    for th in threads:
        th.join()
    return answers


def mode_queue(port, model, n):
    answers = slow_requests(port, model, n, 3000)
    codes = [a[0] for a in answers]
    print("queue: statuses", sorted(codes))
    check(set(codes) <= {200, 503}, "queue: statuses other than 200 and 503: %s" % codes)
    check(200 in codes and 503 in codes, "queue: want both 200 and 503: %s" % codes)
    for st, h, out in answers:
        if st == 503:
            check(h.get("retry-after") == "1" and "error" in out, "queue: 503 without Retry-After or error: %s %s" % (h, out))
    finish()


# ---- a batch gathers while a run is in flight: the model (test_serve.sh's
# slowb, dim B, each run some tenths of a second) runs a request that finds
# it idle at once; three sent 20 ms apart while that run goes wait for its
# end and run together, though an instance is free (--batch-delay-us longer
# than the run). An attempt counts where the first run was still in flight
# once the three were sent (a machine too slow to send them in time tries
# again, up to three times). ----
def mode_holdjoin(port, model):
    x = lambda k: [("x", "FP32", [1, 4], [0.25 * k, 0.5, 0.75, 1.0])]
    lab = ['model="%s"' % model]
    for attempt in range(3):
        runs0 = metric(port, "rill_serve_runs_total", lab)
        b2 = metric(port, "rill_serve_batch_requests_bucket", lab + ['le="2"'])
        b4 = metric(port, "rill_serve_batch_requests_bucket", lab + ['le="4"'])
        answers = [None] * 4

        def one(i):
            try:
                answers[i] = infer(port, model, x(i + 1))
            except Exception as e:  # noqa: BLE001
                answers[i] = (-1, {}, str(e))

        threads = [threading.Thread(target=one, args=(0,))]
        threads[0].start()
        t0 = time.time()
        while metric(port, "rill_serve_runs_in_flight", lab) != 1 and time.time() - t0 < 30:
            time.sleep(0.005)
        for i in range(1, 4):
            th = threading.Thread(target=one, args=(i,))
            th.start()
            threads.append(th)
            time.sleep(0.02)
        during = answers[0] is None  # the first not answered yet: its run was in flight as the last was sent
        for th in threads:
            th.join()
        check([a[0] for a in answers] == [200] * 4, "holdjoin: statuses %s" % [a[0] for a in answers])
        for st, _, out in answers:
            if st == 200:
                check(out["output_0"][1] == [1, 4], "holdjoin: an answer of shape %s" % (out["output_0"][1],))
        runs = metric(port, "rill_serve_runs_total", lab) - runs0
        joined = (metric(port, "rill_serve_batch_requests_bucket", lab + ['le="4"']) - b4) - (
            metric(port, "rill_serve_batch_requests_bucket", lab + ['le="2"']) - b2)
        print("holdjoin: attempt %d: the first run in flight as the others came: %s; 4 requests in %d runs" % (attempt + 1, during, runs))
        if not during:
            continue
        check(runs == 2, "holdjoin: want 2 runs (the first alone, the 3 that came while it ran together), got %d" % runs)
        check(joined == 1, "holdjoin: want one run of 3 requests, the histogram says %s" % joined)
        finish()
    check(False, "holdjoin: in 3 attempts the first run never lasted until the others were sent")
    finish()


def mode_quiet(port, model, loops, seconds):
    """Six closed-loop clients (so that the model is never idle, which would
    run a request alone) against a slow model (slowp: x plus tanh taken loops
    times, so an answer names its request) served with a delay longer than
    the test and a shorter --batch-quiet-us: the requests that wait while a
    run is in flight start their own run once none has come for the quiet
    time, before that run ends (the runs in flight reach 2), where they used
    to wait for its end (at most 1). Until that is seen or `seconds` pass
    (runs take seconds under the sanitizers)."""
    lab = ['model="%s"' % model]
    stop = time.time() + seconds
    most = [0]
    bad = []
    done = threading.Event()

    def want(v):
        t = v
        for _ in range(loops):
            t = math.tanh(t)
        return t + v

    def client(c):
        k = 0
        while not done.is_set() and time.time() < stop:
            k += 1
            v = 0.01 * (c * 100 + k % 100)
            st, _, out = infer(port, model, [("x", "FP32", [1, 4], [v, 0.5, 0.75, 1.0])])
            if st != 200 or out["output_0"][1] != [1, 4] or abs(out["output_0"][2][0] - want(v)) > 1e-4:
                bad.append((st, v, out))

    joined = [None]

    def poll():
        while not done.is_set() and time.time() < stop:
            n = metric(port, "rill_serve_runs_in_flight", lab)
            most[0] = max(most[0], n or 0)
            if most[0] >= 2:
                # both instances busy, so no run starts meanwhile: of the runs started so far
                # (one alone, then the one the quiet started), how many joined 2 requests or more
                runs = metric(port, "rill_serve_batch_requests_count", lab)
                joined[0] = runs - metric(port, "rill_serve_batch_requests_bucket", lab + ['le="1"'])
                done.set()
            time.sleep(0.002)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(6)] + [threading.Thread(target=poll)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    reqs, runs = metric(port, "rill_serve_requests_total", lab), metric(port, "rill_serve_runs_total", lab)
    print("quiet: %d requests in %d runs, at most %d runs in flight; runs of 2 requests or more by then: %s" % (reqs, runs, most[0], joined[0]))
    check(not bad, "quiet: %d bad answers, the first %s" % (len(bad), bad[:1]))
    check(runs < reqs, "quiet: no requests joined a run (%d requests, %d runs)" % (reqs, runs))
    check(most[0] >= 2, "quiet: a batch never started while a run was in flight (at most %d runs in flight)" % most[0])
    # the run started while another was in flight gathered the requests that came within the quiet
    # time of each other (a batch started at the first arrival would hold one)
    check(joined[0] is None or joined[0] >= 1, "quiet: the run started beside another held one request (no gathering)")
    finish()


# ---- fuzz ----
GOOD = b'{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}]}'


def raw(port, payload, timeout=5):
    s = socket.create_connection((HOST, port), timeout=timeout)
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        return got
    except (socket.timeout, ConnectionError):
        return None
    finally:
        s.close()


def mutate(rnd, b):
    b = bytearray(b)
    for _ in range(rnd.randint(1, 6)):
        op = rnd.randint(0, 5)
        i = rnd.randint(0, max(0, len(b) - 1))
        if op == 0 and b:
            b[i] = rnd.randint(0, 255)
        elif op == 1:
            b[i:i] = rnd.choice([b"[", b"]", b"{", b"}", b",", b'"', b"-1", b"1e999", b"\0", b"99999999999", b"null", b"true"])
        elif op == 2 and b:
            del b[i:i + rnd.randint(1, 8)]
        elif op == 3:
            b = b[:i]
        elif op == 4:
            b += bytes(rnd.randint(0, 255) for _ in range(rnd.randint(1, 16)))
        else:
            j = rnd.randint(0, max(0, len(b) - 1))
            b[i:i] = b[j:j + rnd.randint(1, 16)]
    return bytes(b)


BODIES = [GOOD,
          b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}' + bytes(16),
          b'{"id":"q","inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[[1,2,3,4],[5,6,7,8]]}],'
          b'"outputs":[{"name":"output_1","parameters":{"binary_data":true}}]}']


def json_mutate(rnd):
    """a well-formed request with one field given a value of another kind"""
    req = {"id": "f", "parameters": {"binary_data_output": False},
           "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6, 7, 8]}],
           "outputs": [{"name": "output_0", "parameters": {"binary_data": False}}]}
    odd = [None, True, -1, 0, 2 ** 63, 1e308, -1e-300, 1.5, "", "x" * 300, [], [[]], {}, {"a": 1}, [1, [2, [3]]], "FP16", "BOOL",
           [2, 4], [0, 4], [64, 4], [65, 4], [2] * 9, "output_1", [1] * 8]
    targets = [(req, "id"), (req, "parameters"), (req["parameters"], "binary_data_output"), (req, "inputs"), (req["inputs"][0], "name"),
               (req["inputs"][0], "shape"), (req["inputs"][0], "datatype"), (req["inputs"][0], "data"), (req, "outputs"),
               (req["outputs"][0], "name"), (req["outputs"][0], "parameters"), (req["inputs"][0]["shape"], 0),
               (req["inputs"][0]["data"], 3), (req["parameters"], "timeout")]
    for _ in range(rnd.randint(1, 3)):
        obj, key = rnd.choice(targets)
        obj[key] = rnd.choice(odd)
    if rnd.random() < 0.3 and isinstance(req["inputs"], list) and req["inputs"] and isinstance(req["inputs"][0], dict):
        req["inputs"].append(dict(req["inputs"][0]))
    return json.dumps(req).encode()


def mode_fuzz(port, count, seconds):
    rnd = random.Random(int(os.environ.get("FUZZ_SEED", "11")))  # FUZZ_SEED: another sequence
    t_end = time.time() + seconds
    codes = {}
    done = 0
    for i in range(count):
        if time.time() > t_end:
            break
        kind = rnd.randint(0, 4)
        body = json_mutate(rnd) if kind == 4 else mutate(rnd, rnd.choice(BODIES))
        if kind in (0, 4):  # a mangled body, honest headers
            hdr = b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
            if body.startswith(BODIES[1][:20]) or rnd.random() < 0.3:
                hdr += b"Inference-Header-Content-Length: %d\r\n" % rnd.choice([len(body) - 16, 0, len(body), len(body) + 5, 95])
            payload = hdr + b"Connection: close\r\n\r\n" + body
        elif kind == 1:  # mangled request line and headers
            payload = mutate(rnd, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                                  b"Inference-Header-Content-Length: 20\r\nConnection: close\r\n\r\n" % len(GOOD)) + GOOD
        elif kind == 2:  # paths and methods
            path = mutate(rnd, rnd.choice([b"/v2/models/mlp", b"/v2/models/mlp/versions/1/infer", b"/metrics", b"/v2/health/ready"]))
            payload = rnd.choice([b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD "]) + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        else:  # chunked bodies
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in [body[:7], body[7:]] if c) + b"0\r\n\r\n"
            payload = b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + mutate(rnd, chunks)
        got = raw(port, payload)
        code = int(got.split(b" ")[1]) if got and got.startswith(b"HTTP/1.1 ") and len(got.split(b" ")) > 1 and got.split(b" ")[1].isdigit() else None
        codes[code] = codes.get(code, 0) + 1
        check(code in (None, 200, 400, 404, 405, 413, 414, 417, 431, 501, 503, 504), "fuzz: status %s for %r" % (code, payload[:200]))
        done += 1
        if i % 50 == 0:
            st, h, data = request(port, "GET", "/v2/health/live")
            check(st == 200, "fuzz: server not live after %d requests" % i)
    st, h, out = infer(port, "mlp", [("x", "FP32", [2, 4], [1, 2, 3, 4, 5, 6, 7, 8])])
    check(st == 200, "fuzz: a good request after the fuzzing: %s" % st)
    print("fuzz: %d requests, statuses %s" % (done, sorted(codes.items(), key=lambda kv: str(kv[0]))))
    finish()


# ---- slow connections ----
def mode_idle(port, timeout_s):
    """a connection sending half a request, and one sending nothing, are closed by the server in time"""
    for what, payload in (("half a request", b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"in"),
                          ("nothing", b"")):
        s = socket.create_connection((HOST, port), timeout=timeout_s + 5)
        t = time.time()
        s.sendall(payload)
        try:
            while s.recv(4096):
                pass
            closed = True
        except (socket.timeout, ConnectionError):
            closed = False
        s.close()
        took = time.time() - t
        print("idle: %s: closed after %.2f s" % (what, took))
        check(closed and took < timeout_s + 3, "idle: a connection sending %s was not closed in time (%.2f s)" % (what, took))
    st, h, data = request(port, "GET", "/v2/health/live")
    check(st == 200, "idle: server not live after")
    finish()


# ---- --max-connections ----
def mode_maxconn(port, n):
    """n connections open: one more is closed at once; with them closed, it is served"""
    held = [socket.create_connection((HOST, port), timeout=5) for _ in range(n)]
    for s in held:  # each one is accepted and served
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        check(s.recv(4096).startswith(b"HTTP/1.1 200"), "maxconn: one of the first %d connections not served" % n)
    extra = socket.create_connection((HOST, port), timeout=5)
    try:
        extra.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        got = extra.recv(4096)
    except (ConnectionError, socket.timeout):
        got = b""
    check(got == b"", "maxconn: connection %d answered %r" % (n + 1, got[:40]))
    extra.close()
    for s in held:
        s.close()
    time.sleep(0.2)
    st, h, data = request(port, "GET", "/v2/health/live")
    check(st == 200, "maxconn: not served after the connections closed")
    finish()


# ---- compare: a fixed-shape f32 model's answer against rill run ----
def mode_compare(port, rill, name, path):
    st, h, data = request(port, "GET", "/v2/models/" + name)
    meta = json.loads(data)
    rnd = random.Random(3)
    inputs = []
    with tempfile.TemporaryDirectory() as tmp:
        args = [rill, "run", path, "--device=cpu"]
        for i, t in enumerate(meta["inputs"]):
            n = 1
            for d in t["shape"]:
                n *= d
            vals = [rnd.randint(-32, 32) / 8.0 for _ in range(n)]
            inputs.append((t["name"], t["datatype"], t["shape"], vals))
            npy_write(os.path.join(tmp, "i%d.npy" % i), t["datatype"], t["shape"], vals)
            args.append("--input=@" + os.path.join(tmp, "i%d.npy" % i))
        for k in range(len(meta["outputs"])):
            args.append("--output=@" + os.path.join(tmp, "o%d.npy" % k))
        subprocess.run(args, check=True, capture_output=True)
        st, h, out = infer(port, name, inputs, binary_out=True)
        check(st == 200, "compare: %s: status %s %s" % (name, st, out))
        for k, o in enumerate(meta["outputs"]):
            want = npy_read(os.path.join(tmp, "o%d.npy" % k))[1]
            check(st == 200 and out[o["name"]][2] == want, "compare: %s: %s differs from rill run" % (name, o["name"]))
    finish()


# ---- drain ----
def mode_drain(port, pid, model, n):
    def stop():
        time.sleep(0.3)
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.1)
        try:
            st, h, data = request(port, "GET", "/v2/health/live", timeout=2)
            check(False, "drain: a new connection was answered %s during the drain" % st)
        except (ConnectionError, socket.timeout, OSError):
            pass

    answers = slow_requests(port, model, n, 20000, stop)
    codes = [a[0] for a in answers]
    print("drain: statuses", codes)
    check(all(c == 200 for c in codes), "drain: requests taken before SIGTERM not all answered 200: %s" % answers)
    finish()


# ---- generation (a Hugging Face folder) ----
def sse_events(data):
    """the JSON of each server-sent event, with its event name"""
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        name, payload = "message", None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                payload = json.loads(line[6:])
        out.append((name, payload))
    return out


def generate(port, model, body, stream, conn=None):
    path = "/v2/models/%s/%s" % (model, "generate_stream" if stream else "generate")
    st, h, data = request(port, "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}, conn=conn, timeout=120)
    return st, h, data


def rill_llm_tokens(rill, d, ids, n, positions, temperature, top_k, top_p, seed):
    cmd = [rill, "llm", d, "--device=cpu", "--prompt-ids=i64[1,%d]=%s" % (len(ids), " ".join(map(str, ids))), "-n", str(n),
           "--max-length=%d" % positions, "--output=-"]
    if temperature > 0:
        cmd += ["--temperature=%g" % temperature, "--seed=%d" % seed]
        if top_k:
            cmd.append("--top-k=%d" % top_k)
        if top_p < 1:
            cmd.append("--top-p=%g" % top_p)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.split("=", 1)[1].replace("[", " ").replace("]", " ").replace(",", " ").split()]


def mode_generate(port, rill, d, n, conc):
    """n generations (streamed and not, greedy and sampled) from conc clients at once: each one's tokens
    equal `rill llm`'s for the same prompt and sampler settings"""
    st, h, meta = request(port, "GET", "/v2/models/" + os.path.basename(d.rstrip("/")))
    meta = json.loads(meta)
    model, mp = meta["name"], meta["parameters"]
    positions, vocab = mp["max_prompt"] + mp["max_tokens"], mp["vocab_size"]
    rnd = random.Random(3)
    reqs = []
    for i in range(n):
        ids = [rnd.randrange(vocab) for _ in range(rnd.randint(1, 6))]
        k = rnd.randint(1, mp["max_tokens"])
        t, top_k, top_p, seed = 0.0, 0, 1.0, 0
        if rnd.random() < 0.6:
            t, seed = rnd.choice([0.7, 1.3]), rnd.choice([1, 2])
            top_k = rnd.choice([0, 5])
            top_p = rnd.choice([1.0, 0.9])
        body = {"id": "g%d" % i, "input_ids": ids, "parameters": {"max_tokens": k, "temperature": t, "top_k": top_k, "top_p": top_p, "seed": seed}}
        reqs.append((body, i % 2 == 0))

    def one(conn, i):
        body, stream = reqs[i]
        return generate(port, model, body, stream, conn=conn)

    t0 = time.time()
    answers = run_clients(port, n, conc, one)
    print("generate: %d generations from %d clients in %.2f s" % (n, conc, time.time() - t0))
    want_cache = {}
    total = 0
    for i, (body, stream) in enumerate(reqs):
        st, h, data = answers[i]
        if st != 200:
            check(False, "generate %d: status %s %s" % (i, st, data))
            continue
        p = body["parameters"]
        if stream:
            check(h.get("content-type", "").startswith("text/event-stream"), "generate %d: content-type %s" % (i, h.get("content-type")))
            ev = sse_events(data)
            toks = [e["token_id"] for name, e in ev[:-1]]
            check(all(name == "message" for name, e in ev) and [e["index"] for name, e in ev[:-1]] == list(range(len(toks))),
                  "generate %d: events %s" % (i, ev[:3]))
            last = ev[-1][1] if ev else {}
            check(last.get("output_ids") == toks and last.get("id") == body["id"], "generate %d: the last event %s, tokens %s" % (i, last, toks))
            reason = last.get("finish_reason")
        else:
            doc = json.loads(data)
            toks, reason = doc.get("output_ids"), doc.get("finish_reason")
            check(doc.get("id") == body["id"], "generate %d: id %s" % (i, doc.get("id")))
        key = (tuple(body["input_ids"]), p["temperature"], p["top_k"], p["top_p"], p["seed"])
        if key not in want_cache:
            want_cache[key] = rill_llm_tokens(rill, d, body["input_ids"], mp["max_tokens"], positions, p["temperature"], p["top_k"], p["top_p"], p["seed"])
        want = want_cache[key][:p["max_tokens"]]
        if reason == "length":
            check(toks == want, "generate %d: tokens %s, rill llm's %s (%s)" % (i, toks, want, body))
        else:
            check(reason == "stop" and toks == want[:len(toks)] and len(toks) < p["max_tokens"],
                  "generate %d: stopped (%s) after %s, rill llm's %s" % (i, reason, toks, want))
        total += len(toks or [])
    got = metric(port, "rill_serve_generated_tokens_total", ['model="%s"' % model])
    check(got is not None and got >= total, "generate: %s tokens in /metrics, %d answered" % (got, total))
    print("generate: %d tokens checked against rill llm" % total)
    finish()


def mode_generate_errors(port, model, queue):
    """400s for bad generate requests, 503 with Retry-After past the queue, the server generating after"""
    bad = [({"input_ids": []}, "1 to"), ({"text_input": "hi"}, "no tokenizer"), ({"input_ids": [1, -1]}, "is not a token id"),
           ({"input_ids": [1, 100000]}, "is not a token id"), ({"input_ids": "12"}, "an array"),
           ({"input_ids": [1], "parameters": {"max_tokens": 0}}, "max_tokens must be"),
           ({"input_ids": [1], "parameters": {"max_tokens": 1000000}}, "max_tokens must be"),
           ({"input_ids": [1], "parameters": {"temperature": -1}}, "temperature must be"),
           ({"input_ids": [1], "parameters": {"top_p": 0}}, "top_p must be"), ({"input_ids": [1], "parameters": {"seed": 1.5}}, "seed must be"),
           ({"input_ids": [1], "parameters": []}, "must be an object"), ({"id": 5, "input_ids": [1]}, 'must be a string')]
    for body, text in bad:
        for stream in (False, True):
            st, h, data = generate(port, model, body, stream)
            check(st == 400 and text in data.decode(), "generate-errors: %s: status %s %s, want 400 with '%s'" % (body, st, data[:200], text))
    st, h, data = request(port, "POST", "/v2/models/%s/generate" % model, b"{\"input_ids\": [1,", {})
    check(st == 400 and b"not JSON" in data, "generate-errors: broken JSON: %s %s" % (st, data))
    st, h, data = request(port, "POST", "/v2/models/%s/infer" % model, b"{}", {})
    check(st == 400 and b"generates" in data, "generate-errors: infer on a generating model: %s %s" % (st, data))
    st, h, data = request(port, "GET", "/v2/models/%s/generate" % model)
    check(st == 405, "generate-errors: GET generate: %s" % st)
    # more at once than the instances and the queue hold: 503s with Retry-After, the rest 200
    body = {"input_ids": [1, 2, 3], "parameters": {"max_tokens": 12, "ignore_eos": True}}
    answers = run_clients(port, queue * 4, queue * 4, lambda conn, i: generate(port, model, body, i % 2 == 0, conn=conn))
    codes = sorted(set(a[0] for a in answers))
    check(set(codes) <= {200, 503} and 503 in codes and 200 in codes, "generate-errors: statuses %s past the queue" % codes)
    for st, h, data in answers:
        if st == 503:
            check(h.get("retry-after") == "1", "generate-errors: 503 without Retry-After")
    # a client that goes away mid-stream: its generation stops, the server goes on
    s = socket.create_connection((HOST, port), timeout=10)
    b = json.dumps(body).encode()
    s.sendall(b"POST /v2/models/%s/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (model.encode(), len(b), b))
    s.recv(100)
    s.close()
    st, h, data = generate(port, model, {"input_ids": [4], "parameters": {"max_tokens": 2}}, False)
    check(st == 200 and len(json.loads(data)["output_ids"]) <= 2, "generate-errors: after a client left: %s %s" % (st, data))
    finish()


GEN_GOOD = {"id": "f", "input_ids": [1, 2, 3], "parameters": {"max_tokens": 3, "temperature": 0.5, "top_k": 3, "top_p": 0.9, "seed": 4}}


def mode_genfuzz(port, model, count, seconds):
    """mangled generate requests (FUZZ_SEED): each answered with a status or closed, the server generating after"""
    rnd = random.Random(int(os.environ.get("FUZZ_SEED", "13")))
    t_end = time.time() + seconds
    codes = {}
    odd = [None, True, False, -1, 0, 2 ** 63, 1e308, -1e-300, 0.5, "", "x" * 300, [], [[]], {}, {"a": 1}, [1, [2]], [-5], [10 ** 6], [1] * 2000]
    done = 0
    for i in range(count):
        if time.time() > t_end:
            break
        req = json.loads(json.dumps(GEN_GOOD))
        if rnd.random() < 0.5:
            for _ in range(rnd.randint(1, 3)):
                obj, key = rnd.choice([(req, "id"), (req, "input_ids"), (req, "parameters"), (req["parameters"], "max_tokens"),
                                       (req["parameters"], "temperature"), (req["parameters"], "top_k"), (req["parameters"], "top_p"),
                                       (req["parameters"], "seed"), (req["parameters"], "ignore_eos"), (req["input_ids"], 1), (req, "text_input")])
                try:
                    obj[key] = rnd.choice(odd)
                except (TypeError, IndexError):  # its container was replaced by an earlier change
                    pass
            body = json.dumps(req).encode()
        else:
            body = mutate(rnd, json.dumps(GEN_GOOD).encode())
        path = b"/v2/models/%s/%s" % (model.encode(), rnd.choice([b"generate", b"generate_stream"]))
        payload = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
        got = raw(port, payload, timeout=30)
        code = int(got.split(b" ")[1]) if got and got.startswith(b"HTTP/1.1 ") and got.split(b" ")[1].isdigit() else None
        codes[code] = codes.get(code, 0) + 1
        check(code in (200, 400, 503), "genfuzz: status %s for %r" % (code, body[:200]))
        done += 1
        if i % 25 == 0:
            st, h, data = request(port, "GET", "/v2/health/live")
            check(st == 200, "genfuzz: server not live after %d requests" % i)
    st, h, data = generate(port, model, GEN_GOOD, True)
    check(st == 200 and sse_events(data)[-1][1].get("finish_reason") in ("length", "stop"), "genfuzz: a good request after: %s" % st)
    print("genfuzz: %d requests, statuses %s" % (done, sorted(codes.items(), key=lambda kv: str(kv[0]))))
    finish()


# ---- batches of megabytes (the copy into staging split among threads) ----
def mode_bigload(port, model, n, conc, width):
    """@main(x: f32[B,width]) -> (sum over each row, x[:,0] * 2): n binary requests of 1..4 rows from conc clients at once"""
    rnd = random.Random(9)
    reqs = []
    for i in range(n):
        rows = rnd.randint(1, 4)
        base = [rnd.randint(-8, 8) for _ in range(rows)]
        vals = [float(base[r] + (k % 5) - 2) for r in range(rows) for k in range(width)]
        reqs.append((rows, vals))

    def one(conn, i):
        rows, vals = reqs[i]
        return infer(port, model, [("x", "FP32", [rows, width], vals)], conn=conn, binary_in=True, binary_out=True, rid="b%d" % i)

    answers = run_clients(port, n, conc, one)
    for i, (rows, vals) in enumerate(reqs):
        st, h, out = answers[i]
        if st != 200:
            check(False, "bigload %d: status %s %s" % (i, st, out))
            continue
        want_s = [sum(vals[r * width:(r + 1) * width]) for r in range(rows)]
        want_f = [2 * vals[r * width] for r in range(rows)]
        check(out["output_0"][2] == want_s and out["output_1"][2] == want_f, "bigload %d: %s %s, want %s %s" % (
            i, out["output_0"][2], out["output_1"][2], want_s, want_f))
    runs = metric(port, "rill_serve_batch_requests_count", ['model="%s"' % model])
    big = metric(port, "rill_serve_batch_rows_bucket", ['model="%s"' % model, 'le="4"'])
    print("bigload: %d requests of %d KiB rows in %s runs (%s of them 4 rows or fewer)" % (n, width * 4 // 1024, runs, big))
    check(runs is not None and big is not None and runs > big, "bigload: no run joined more than 4 rows (no batch of megabytes)")
    finish()


# ---- one connection's requests: in pieces, larger than its buffer, together ----
def read_answer(f):
    """status, headers, body of one response from a socket's file (keep-alive: exactly Content-Length)"""
    line = f.readline()
    if not line:
        return None, {}, b""
    status = int(line.split()[1])
    headers = {}
    while True:
        line = f.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    return status, headers, f.read(int(headers.get("content-length", 0)))


def big_request(model, rows, width, seed):
    """a binary request of rows x width floats (small integers), its bytes and the answer it wants"""
    rnd = random.Random(seed)
    vals = [float(rnd.randint(-8, 8)) for _ in range(rows * width)]
    body, headers = infer_body([("x", "FP32", [rows, width], vals)], binary_in=True, binary_out=True)
    head = "POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n" % model
    head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "Content-Length: %d\r\n\r\n" % len(body)
    want = ([sum(vals[r * width:(r + 1) * width]) for r in range(rows)], [2 * vals[r * width] for r in range(rows)])
    return head.encode() + body, want


def check_answer(what, answer, want):
    st, h, data = answer
    if st != 200:
        check(False, "%s: status %s %s" % (what, st, data[:200]))
        return
    out, doc = parse_response(h, data)
    check((out["output_0"][2], out["output_1"][2]) == want, "%s: %s %s, want %s" % (what, out["output_0"][2][:4], out["output_1"][2][:4],
                                                                                   (want[0][:4], want[1][:4])))


def mode_pieces(port, model, width):
    """@main(x: f32[B,width]) -> (sum over each row, x[:,0] * 2), as bigload"""
    s = socket.create_connection((HOST, port), timeout=30)
    f = s.makefile("rb")
    # 1. in pieces: the request line, a header cut in two, the JSON cut in two, the binary data in seven
    req, want = big_request(model, 1, width, 1)
    hl = req.index(b"\r\n\r\n") + 4
    cuts = sorted({5, hl - 20, hl + 30} | {hl + 60 + k * (len(req) - hl - 60) // 7 for k in range(7)} | {len(req)})
    at = 0
    for c in cuts:
        s.sendall(req[at:c])
        at = c
        time.sleep(0.02)
    check_answer("pieces: a request in %d pieces" % len(cuts), read_answer(f), want)
    # 2. more rows than a connection's first buffer holds (it grows)
    req, want = big_request(model, 4, width, 2)
    s.sendall(req)
    check_answer("pieces: 4 rows (%d bytes)" % len(req), read_answer(f), want)
    # 3. two requests in one write: the second's bytes arrive with the first's
    r1, w1 = big_request(model, 1, width, 3)
    r2, w2 = big_request(model, 2, width, 4)
    s.sendall(r1 + r2)
    check_answer("pieces: the first of two sent together", read_answer(f), w1)
    check_answer("pieces: the second of two sent together", read_answer(f), w2)
    # 4. more, of 1 and 3 rows, one after another (the buffers come back and are used again)
    for i in range(24):
        req, want = big_request(model, 1 + 2 * (i % 2), width, 10 + i)
        s.sendall(req)
        check_answer("pieces: request %d of 24" % i, read_answer(f), want)
    f.close()
    s.close()
    finish()


def mode_limit(port, model, limit):
    """@main(x: f32[B,4]) (the mlp): a JSON request padded with spaces to exactly `limit` bytes, then one more"""
    body, headers = infer_body([("x", "FP32", [1, 4], [1.0, 2.0, 3.0, 4.0])])
    pad = b" " * (limit - len(body))
    st, h, data = request(port, "POST", "/v2/models/%s/infer" % model, body + pad, headers)
    check(st == 200 and b'"shape":[1,3]' in data, "limit: a body of exactly %d bytes: %s %s" % (limit, st, data[:200]))
    st, h, data = request(port, "POST", "/v2/models/%s/infer" % model, body + pad + b" ", headers)
    check(st == 413, "limit: a body of %d bytes: %s, want 413" % (limit + 1, st))
    finish()


# ---- several HTTP threads: every answer its own request's rows ----
def mode_mtload(port, model, n, conc, threads):
    """@main(x: f32[B,8]) -> (2x + 1, the sum of each row): n requests of 1..4 rows whose values name the
    request and the row, JSON and binary, from conc clients; every answer must hold its own rows. Every
    tenth JSON one has a string for its last value: refused (400) after its rows were placed in a batch,
    which runs for the others"""
    rnd = random.Random(11)
    reqs = []
    for i in range(n):
        rows = rnd.randint(1, 4)
        reqs.append((rows, [float(i * 100 + r * 10 + k) for r in range(rows) for k in range(8)], rnd.random() < 0.5))
    before = metric(port, "rill_serve_requests_total", ['model="%s"' % model]) or 0

    def one(conn, i):
        rows, vals, binary = reqs[i]
        body, headers = infer_body([("x", "FP32", [rows, 8], vals)], binary_in=binary, binary_out=not binary, rid="m%d" % i)
        if i % 10 == 7 and not binary:
            body = body.replace(b"%d.0]" % (i * 100 + (rows - 1) * 10 + 7), b'"x"]')
        st, h, data = request(port, "POST", "/v2/models/%s/infer" % model, body, headers, conn=conn)
        return st, h, parse_response(h, data) if st == 200 else (data, {})

    t = time.time()
    answers = run_clients(port, n, conc, one)
    print("mtload: %d requests from %d clients in %.2f s" % (n, conc, time.time() - t))
    bad = 0
    for i, (rows, vals, binary) in enumerate(reqs):
        st, h, (out, doc) = answers[i] if answers[i][0] != -1 else (-1, {}, (answers[i][2], {}))
        if i % 10 == 7 and not binary:
            if st != 400 or b"not a number" not in out:
                bad += 1
                check(False, "mtload: request %d (a string among its values): %s %s" % (i, st, str(out)[:300]))
            continue
        want_y = [2 * v + 1 for v in vals]
        want_s = [sum(vals[r * 8:(r + 1) * 8]) for r in range(rows)]
        ok = st == 200 and doc.get("id") == "m%d" % i and out["output_0"][1] == [rows, 8] and out["output_0"][2] == want_y \
            and out["output_1"][2] == want_s
        if not ok:
            bad += 1
            check(False, "mtload: request %d (%d rows): %s %s" % (i, rows, st, str(out)[:300]))
    print("mtload: %d of %d answers wrong or lost" % (bad, n))
    got = metric(port, "rill_serve_requests_total", ['model="%s"' % model])
    check(got is not None and got - before == n, "mtload: the server counted %s requests, want %d" % (got, n))
    refused = sum(1 for i in range(n) if i % 10 == 7 and not reqs[i][2])
    check(refused > 0 and metric(port, "rill_serve_responses_total", ['model="%s"' % model, 'code="400"']) == refused,
          "mtload: want %d answered 400" % refused)
    runs = metric(port, "rill_serve_batch_requests_count", ['model="%s"' % model])
    alone = metric(port, "rill_serve_batch_requests_bucket", ['model="%s"' % model, 'le="1"'])
    filled = metric(port, "rill_serve_filled_requests_total", ['model="%s"' % model])
    print("mtload: %s runs, %s of them one request alone; %s requests decoded into their batch by their HTTP thread" % (runs, alone, filled))
    check(runs is not None and alone is not None and runs > alone, "mtload: no run joined two requests")
    check(filled is not None and filled > 0, "mtload: no request was decoded straight into its batch")
    st, h, data = request(port, "GET", "/metrics")
    per = [float(l.split()[-1]) for l in data.decode().splitlines() if l.startswith("rill_serve_http_thread_requests_total{")]
    print("mtload: requests per HTTP thread", per)
    check(len(per) == threads, "mtload: %d HTTP threads in /metrics, want %d" % (len(per), threads))
    check(sum(1 for v in per if v > 0) >= 2, "mtload: the connections did not spread over the HTTP threads: %s" % per)
    finish()


if __name__ == "__main__":
    m = sys.argv[1]
    a = sys.argv[2:]
    if m == "dtypes":
        mode_dtypes(int(a[0]), a[1])
    elif m == "pieces":
        mode_pieces(int(a[0]), a[1], int(a[2]))
    elif m == "limit":
        mode_limit(int(a[0]), a[1], int(a[2]))
    elif m == "load":
        mode_load(int(a[0]), a[1], a[2], int(a[3]), int(a[4]))
    elif m == "shapes":
        mode_shapes(int(a[0]), a[1], int(a[2]), int(a[3]))
    elif m == "queue":
        mode_queue(int(a[0]), a[1], int(a[2]))
    elif m == "holdjoin":
        mode_holdjoin(int(a[0]), a[1])
    elif m == "quiet":
        mode_quiet(int(a[0]), a[1], int(a[2]), float(a[3]))
    elif m == "fuzz":
        mode_fuzz(int(a[0]), int(a[1]), float(a[2]))
    elif m == "idle":
        mode_idle(int(a[0]), float(a[1]))
    elif m == "maxconn":
        mode_maxconn(int(a[0]), int(a[1]))
    elif m == "compare":
        mode_compare(int(a[0]), a[1], a[2], a[3])
    elif m == "drain":
        mode_drain(int(a[0]), int(a[1]), a[2], int(a[3]))
    elif m == "mtload":
        mode_mtload(int(a[0]), a[1], int(a[2]), int(a[3]), int(a[4]))
    elif m == "bigload":
        mode_bigload(int(a[0]), a[1], int(a[2]), int(a[3]), int(a[4]))
    elif m == "generate":
        mode_generate(int(a[0]), a[1], a[2], int(a[3]), int(a[4]))
    elif m == "generate-errors":
        mode_generate_errors(int(a[0]), a[1], int(a[2]))
    elif m == "genfuzz":
        mode_genfuzz(int(a[0]), a[1], int(a[2]), float(a[3]))
    else:
        sys.exit("unknown mode " + m)
