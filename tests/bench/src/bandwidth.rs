//! Bandwidth rows: NCCL all-reduce through `cuda_stream::nccl` against the raw NCCL calls on
//! the same buffers and streams (feature `nccl`), and peer copies through
//! `DeviceBuffer::copy_from_peer` against raw `cuMemcpyPeerAsync` on the same buffers.
//!
//! Each row times batches of back-to-back operations on the host (synchronised before and after,
//! so the enqueue cost of each side counts), alternating which side goes first; it reports the
//! median time of each side, the bandwidth, and the median of the repetitions' own ratios
//! (cuda-stream's bandwidth over raw; the target is >= 0.98). The all-reduce's bus bandwidth is
//! NCCL's: `bytes / time * 2 (n - 1) / n` (for one rank, the algorithm bandwidth is printed).
//!
//! `--multi-gpu` (two GPUs): all-reduce over both at 1 MiB, 64 MiB and 1 GiB, and peer copies
//! both ways at 64 MiB and 1 GiB, with the link's theoretical bandwidth from `nvidia-smi`. A normal
//! run ends with the one-GPU rows: all-reduce on one rank against raw NCCL.

use std::time::Instant;

use cuda_stream::{Context, Device, DeviceBuffer, Error, OwnedStream};
use cuda_stream_sys as sys;

use crate::fail::chain;

const MIB: usize = 1 << 20;

/// The sizes of the rows, with the iterations per batch (full, quick).
const SIZES: [(usize, &str, u32, u32); 3] = [
    (MIB, "1 MiB", 200, 20),
    (64 * MIB, "64 MiB", 40, 4),
    (1024 * MIB, "1 GiB", 8, 2),
];

type Body<'a> = Box<dyn FnMut() -> Result<(), Error> + 'a>;

/// Seconds per operation of each side (median), and the median of the per-repetition ratios
/// `raw time / safe time` (cuda-stream's bandwidth relative to raw).
fn time_pair(
    reps: usize,
    iters: u32,
    raw: &mut Body<'_>,
    safe: &mut Body<'_>,
    sync: &dyn Fn() -> Result<(), Error>,
) -> Result<(f64, f64, f64), Error> {
    let run = |f: &mut Body<'_>| -> Result<f64, Error> {
        sync()?;
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        sync()?;
        Ok(t.elapsed().as_secs_f64() / f64::from(iters))
    };
    // Warm-up, untimed.
    run(raw)?;
    run(safe)?;
    let (mut rs, mut ss, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let (r, s) = if rep % 2 == 0 {
            let r = run(raw)?;
            (r, run(safe)?)
        } else {
            let s = run(safe)?;
            (run(raw)?, s)
        };
        rs.push(r);
        ss.push(s);
        ratios.push(r / s);
    }
    Ok((median(rs), median(ss), median(ratios)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn gbps(bytes: usize, s: f64) -> f64 {
    bytes as f64 / s / 1e9
}

/// The all-reduce rows' target (cuda-stream's bandwidth over raw NCCL's).
#[cfg(feature = "nccl")]
const ALL_REDUCE_TARGET: f64 = 0.98;
/// The peer copy rows' target (and >= 350 GB/s on NVLink, read off the table).
const PEER_TARGET: f64 = 0.95;

fn verdict(ratio: f64, target: f64) -> &'static str {
    if ratio >= target { "met" } else { "not met" }
}

fn sync_all(streams: &[&OwnedStream]) -> Result<(), Error> {
    for s in streams {
        s.synchronize()?;
    }
    Ok(())
}

/// The theoretical bandwidth of the link between GPUs 0 and 1, from `nvidia-smi`: the sum of
/// GPU 0's active NVLink links, else its PCIe link.
fn link_bandwidth() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("nvidia-smi")
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let nvlink = run(&["nvlink", "-s", "-i", "0"]);
    let links: Vec<f64> = nvlink
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(':')?;
            rest.trim().strip_suffix("GB/s")?.trim().parse().ok()
        })
        .collect();
    if !links.is_empty() {
        let total: f64 = links.iter().sum();
        return format!(
            "NVLink: {} links of GPU 0, {total:.1} GB/s per direction in all (nvidia-smi nvlink -s)",
            links.len()
        );
    }
    let pcie = run(&[
        "--query-gpu=pcie.link.gen.current,pcie.link.width.current",
        "--format=csv,noheader",
        "-i",
        "0",
    ]);
    let mut it = pcie.trim().split(',').map(|s| s.trim().parse::<u32>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(generation), Some(width)) => {
            let per_lane = match generation {
                1 => 0.25,
                2 => 0.5,
                3 => 0.985,
                4 => 1.969,
                5 => 3.938,
                _ => 7.563,
            };
            format!(
                "PCIe gen {generation} x{width}: {:.1} GB/s per direction (no active NVLink)",
                per_lane * f64::from(width)
            )
        }
        _ => "unknown (nvidia-smi gave neither NVLink nor PCIe link data)".to_string(),
    }
}

fn print_header(what: &str, target: f64) {
    println!();
    println!("{what}");
    println!();
    println!("| row | size | raw | cuda-stream | ratio (median of reps) | target >= {target} |");
    println!("| --- | --- | --- | --- | --- | --- |");
}

fn print_row(row: &str, label: &str, unit: &str, (raw, safe): (f64, f64), ratio: f64, target: f64) {
    println!(
        "| {row} | {label} | {raw:.1} {unit} | {safe:.1} {unit} | {ratio:.3} | {} |",
        verdict(ratio, target)
    );
}

/// Peer copies both ways between devices 0 and 1.
fn peer_rows(c0: &Context, c1: &Context, quick: bool, reps: usize) -> Result<(), Error> {
    for (a, b) in [(c0, c1), (c1, c0)] {
        if a.device().can_access_peer(b.device())? {
            a.enable_peer_access(b)?;
        }
    }
    println!();
    println!(
        "Peer access 0->1: {}, 1->0: {}. Link: {}",
        c0.device().can_access_peer(c1.device())?,
        c1.device().can_access_peer(c0.device())?,
        link_bandwidth()
    );
    print_header(
        "Peer copy bandwidth, GB/s (DeviceBuffer::copy_from_peer vs raw cuMemcpyPeerAsync, each on a stream of the destination's context; the same buffers)",
        PEER_TARGET,
    );
    let copy = sys::fns::cuMemcpyPeerAsync().map_err(Error::Load)?;
    // Bandwidth sizes: at 1 MiB a copy takes a few microseconds, and the rows would time the
    // host's enqueue instead (cuda-stream's two event hand-overs per copy).
    for (bytes, label, full, q) in SIZES.into_iter().skip(1) {
        let iters = if quick { q } else { full };
        for (dst_ctx, src_ctx, dir) in [(c1, c0, "0 -> 1"), (c0, c1, "1 -> 0")] {
            let s = dst_ctx.new_stream()?;
            let ss = src_ctx.new_stream()?;
            // The raw column's own stream, of the same kind: the handle of `s` stays inside the
            // crate, as in a program that uses only the safe API (a stream whose handle was
            // taken gets an event after every use; see the use-tracking model).
            let rs = dst_ctx.new_stream()?;
            let src = DeviceBuffer::<u8>::zeroed(src_ctx, &ss, bytes)?;
            let dst = DeviceBuffer::<u8>::zeroed(dst_ctx, &s, bytes)?;
            ss.synchronize()?;
            let (dp, sp, raw_s) = (dst.device_ptr(), src.device_ptr(), rs.raw());
            let (dc, sc) = (dst_ctx.raw(), src_ctx.raw());
            let mut raw: Body<'_> = Box::new(|| {
                // SAFETY: two live allocations of `bytes` bytes in their contexts; the stream is
                // of the destination's context; both buffers outlive the batch (synchronised).
                let rc = unsafe { copy(dp, dc, sp, sc, bytes, raw_s) };
                if rc == sys::CUresult::CUDA_SUCCESS {
                    Ok(())
                } else {
                    Err(Error::Refused {
                        call: "cuMemcpyPeerAsync",
                        reason: "failed in the raw column",
                    })
                }
            });
            let mut safe: Body<'_> = Box::new(|| dst.copy_from_peer(&s, &src));
            let (r, sf, ratio) = time_pair(reps, iters, &mut raw, &mut safe, &|| {
                sync_all(&[&s, &ss, &rs])
            })?;
            print_row(
                &format!("peer copy {dir}"),
                label,
                "GB/s",
                (gbps(bytes, r), gbps(bytes, sf)),
                ratio,
                PEER_TARGET,
            );
        }
    }
    Ok(())
}

#[cfg(feature = "nccl")]
mod collectives {
    use super::*;
    use cuda_stream::nccl::{Communicator, Group, ReduceOp};
    use cuda_stream_sys::nccl::{Nccl, ncclDataType_t, ncclRedOp_t, ncclResult_t};

    fn nccl_err(call: &'static str, rc: ncclResult_t) -> Result<(), Error> {
        if rc == ncclResult_t::ncclSuccess {
            Ok(())
        } else {
            Err(Error::Nccl { call, code: rc })
        }
    }

    fn load<T>(
        f: Result<T, cuda_stream_sys::nccl::NcclLoadError>,
        call: &'static str,
    ) -> Result<T, Error> {
        f.map_err(|source| Error::NcclLoad { call, source })
    }

    /// All-reduce (sum, f32, in place) over one communicator per device of `ctxs`, each rank on
    /// its own stream, one NCCL group per operation on both sides.
    pub(super) fn all_reduce_rows(
        ctxs: &[Context],
        quick: bool,
        reps: usize,
        pin_cpu: Option<usize>,
    ) -> Result<(), Error> {
        let nccl = load(Nccl::global(), "ncclGetVersion")?;
        let all_reduce = load(nccl.ncclAllReduce(), "ncclAllReduce")?;
        let start = load(nccl.ncclGroupStart(), "ncclGroupStart")?;
        let end = load(nccl.ncclGroupEnd(), "ncclGroupEnd")?;
        let devices: Vec<Device> = ctxs.iter().map(Context::device).collect();
        let comms = Communicator::init_all(&devices)?;
        // After NCCL's initialisation, whose threads would otherwise inherit the pinning.
        super::pin_after_init(pin_cpu)?;
        let n = comms.len();
        let streams: Vec<OwnedStream> = ctxs
            .iter()
            .map(|c| c.new_stream())
            .collect::<Result<_, _>>()?;
        // The raw column's own streams, of the same kind, so that the handles of `streams` stay
        // inside the crate, as in a program that uses only the safe API (a stream whose handle
        // was taken gets an event after every use, and a use waits for the last one's).
        let raw_streams: Vec<OwnedStream> = ctxs
            .iter()
            .map(|c| c.new_stream())
            .collect::<Result<_, _>>()?;
        // A second set for the raw group, to tell the cost of alternating between two sets of
        // streams (as the rows do: each side has its own) from the safe side's own.
        let raw_streams2: Vec<OwnedStream> = ctxs
            .iter()
            .map(|c| c.new_stream())
            .collect::<Result<_, _>>()?;
        print_header(
            &format!(
                "NCCL all-reduce (sum, f32, in place) over {n} rank(s), {}: cuda-stream (Communicator, Group) vs raw ncclAllReduce on the same buffers, each side on streams of its own of the same kind; NCCL {}",
                if n > 1 {
                    "bus bandwidth GB/s"
                } else {
                    "algorithm bandwidth GB/s (one rank: a copy)"
                },
                cuda_stream_sys::nccl::format_nccl_version(nccl.version())
            ),
            ALL_REDUCE_TARGET,
        );
        for (bytes, label, full, q) in SIZES {
            let iters = if quick { q } else { full };
            // At 1 MiB a batch takes about 4 ms and its bandwidth moves by several per cent from
            // batch to batch (a control of raw against raw plus a few calls read 1.06): five
            // times the repetitions, for a steadier median.
            let reps = if bytes == MIB && !quick {
                reps * 5
            } else {
                reps
            };
            let mut bufs: Vec<DeviceBuffer<f32>> = ctxs
                .iter()
                .zip(&streams)
                .map(|(c, s)| DeviceBuffer::<f32>::zeroed(c, s, bytes / 4))
                .collect::<Result<_, _>>()?;
            let ptrs: Vec<u64> = bufs.iter().map(DeviceBuffer::device_ptr).collect();
            let raws: Vec<_> = comms.iter().map(Communicator::raw).collect();
            let sraw: Vec<_> = raw_streams.iter().map(OwnedStream::raw).collect();
            let count = bytes / 4;
            let sraw2: Vec<_> = raw_streams2.iter().map(OwnedStream::raw).collect();
            // One raw group of all-reduces on `on` (one stream per rank): on the raw column's
            // streams for the raw column and the controls, on the second set for the control of
            // stream sets.
            let group_on = |on: &[sys::CUstream]| -> Result<(), Error> {
                // SAFETY: each buffer holds `count` f32 on its rank's device, alive for the
                // batch (synchronised after it); each stream is of its rank's context.
                unsafe {
                    nccl_err("ncclGroupStart", start())?;
                    for i in 0..n {
                        let p = ptrs[i] as *mut std::ffi::c_void;
                        let rc = all_reduce(
                            p,
                            p,
                            count,
                            ncclDataType_t::ncclFloat32,
                            ncclRedOp_t::ncclSum,
                            raws[i],
                            on[i],
                        );
                        nccl_err("ncclAllReduce", rc)?;
                    }
                    nccl_err("ncclGroupEnd", end())
                }
            };
            let raw_group = || group_on(&sraw);
            let raw_group2 = || group_on(&sraw2);
            let mut raw: Body<'_> = Box::new(raw_group);
            let bufs_ref = &mut bufs;
            let comms_ref = &comms;
            let streams_ref = &streams;
            let mut safe: Body<'_> = Box::new(move || {
                let mut g = Group::new();
                for ((c, s), b) in comms_ref.iter().zip(streams_ref).zip(bufs_ref.iter_mut()) {
                    g.all_reduce_in_place(c, s, b, ReduceOp::Sum)?;
                }
                g.run()
            });
            let refs: Vec<&OwnedStream> = streams.iter().chain(&raw_streams).collect();
            let (r, s, ratio) = time_pair(reps, iters, &mut raw, &mut safe, &|| sync_all(&refs))?;
            let factor = if n > 1 {
                2.0 * (n as f64 - 1.0) / n as f64
            } else {
                1.0
            };
            print_row(
                &format!("all-reduce, {n} rank(s)"),
                label,
                "GB/s",
                (gbps(bytes, r) * factor, gbps(bytes, s) * factor),
                ratio,
                ALL_REDUCE_TARGET,
            );
            if bytes == MIB && n > 1 {
                // A control at the size that is host-bound: the raw group again, plus the
                // calls the safe side makes that the raw group does not (the capture check per
                // stream, the current context read; NCCL since 2.14 checks each communicator's
                // asynchronous error itself), against the raw group: how much of the gap is
                // those calls' and how much the crate's own work.
                let capturing = sys::fns::cuStreamIsCapturing().map_err(Error::Load)?;
                let get_current = sys::fns::cuCtxGetCurrent().map_err(Error::Load)?;
                // On the raw column's streams (the safe side's stay private).
                let mut checked: Body<'_> = Box::new(|| {
                    // SAFETY: as for `raw`; the queries take live handles and out-pointers.
                    unsafe {
                        for &s in sraw.iter().take(n) {
                            let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                            let _ = capturing(s, &mut st);
                        }
                        let mut cur = std::ptr::null_mut();
                        let _ = get_current(&mut cur);
                        raw_group()
                    }
                });
                let refs: Vec<&OwnedStream> = raw_streams.iter().collect();
                let (r, c, ratio) =
                    time_pair(reps, iters, &mut raw, &mut checked, &|| sync_all(&refs))?;
                print_row(
                    &format!("control: raw + the safe side's checks, {n} rank(s)"),
                    label,
                    "GB/s",
                    (gbps(bytes, r) * factor, gbps(bytes, c) * factor),
                    ratio,
                    ALL_REDUCE_TARGET,
                );
                // The raw group against itself on another set of streams: what alternating
                // between two sets costs, which the rows' two sides also do.
                let mut other: Body<'_> = Box::new(raw_group2);
                let refs2: Vec<&OwnedStream> = raw_streams.iter().chain(&raw_streams2).collect();
                let (r, o, ratio) =
                    time_pair(reps, iters, &mut raw, &mut other, &|| sync_all(&refs2))?;
                print_row(
                    &format!("control: raw on another set of streams, {n} rank(s)"),
                    label,
                    "GB/s",
                    (gbps(bytes, r) * factor, gbps(bytes, o) * factor),
                    ratio,
                    ALL_REDUCE_TARGET,
                );
                host_costs(
                    &mut raw,
                    &mut checked,
                    &mut safe,
                    &ctxs[0],
                    iters,
                    reps,
                    &|| {
                        sync_all(&refs)?;
                        sync_all(&streams.iter().collect::<Vec<_>>())
                    },
                )?;
                gpu_costs(&mut raw, &mut safe, &raw_streams, &streams, reps)?;
                #[cfg(feature = "phases")]
                {
                    let mut timed = || -> Result<f64, Error> {
                        let t = Instant::now();
                        raw_group()?;
                        Ok(t.elapsed().as_secs_f64())
                    };
                    let all: Vec<&OwnedStream> = streams.iter().chain(&raw_streams).collect();
                    phase_costs(&mut safe, &mut timed, &|| sync_all(&all), iters, reps)?;
                }
            }
        }
        Ok(())
    }
}

/// A probe of the GPU's own time per group at 1 MiB, free of the host's: each side's groups are
/// enqueued while a host function holds every rank's stream (20 ms), so that they then run back
/// to back; timing events on the first rank's stream, recorded after the host function and after
/// the last group, bracket them. Equal GPU times put a bandwidth gap on the host's side.
#[cfg(feature = "nccl")]
fn gpu_costs(
    raw: &mut Body<'_>,
    safe: &mut Body<'_>,
    raw_streams: &[OwnedStream],
    streams: &[OwnedStream],
    reps: usize,
) -> Result<(), Error> {
    use cuda_stream::{AsStream, EventOptions};
    const GROUPS: u32 = 20;
    const HOLD: std::time::Duration = std::time::Duration::from_millis(20);
    // GPU seconds per group, and the host's seconds to enqueue them (the measure holds only if
    // that stays well under the hold).
    let measure = |f: &mut Body<'_>, on: &[OwnedStream]| -> Result<(f64, f64), Error> {
        for s in on {
            s.launch_host_func(|| std::thread::sleep(HOLD))?;
        }
        let timing = EventOptions::new().timing(true);
        let start = on[0].as_stream().record_event_with(timing)?;
        let t = Instant::now();
        for _ in 0..GROUPS {
            f()?;
        }
        let enqueue = t.elapsed().as_secs_f64();
        let end = on[0].as_stream().record_event_with(timing)?;
        sync_all(&on.iter().collect::<Vec<_>>())?;
        let gpu = end.elapsed_since(&start)?.as_secs_f64();
        Ok((gpu / f64::from(GROUPS), enqueue))
    };
    measure(raw, raw_streams)?;
    measure(safe, streams)?;
    let (mut r, mut sf, mut ratios, mut longest) = (Vec::new(), Vec::new(), Vec::new(), 0f64);
    for rep in 0..reps {
        let ((a, ea), (b, eb)) = if rep % 2 == 0 {
            let a = measure(raw, raw_streams)?;
            (a, measure(safe, streams)?)
        } else {
            let b = measure(safe, streams)?;
            (measure(raw, raw_streams)?, b)
        };
        longest = longest.max(ea).max(eb);
        r.push(a);
        sf.push(b);
        ratios.push(a / b);
    }
    println!();
    println!(
        "Probe: the GPU's time per all-reduce group of 1 MiB per rank with no host gap ({GROUPS} groups enqueued behind a {HOLD:?} host function on every rank's stream, timed by events on the first rank's; median of {reps}; the longest enqueue took {:.2} ms)",
        longest * 1e3
    );
    println!();
    println!("| side | GPU us per group | ratio raw / cuda-stream (median) |");
    println!("| --- | --- | --- |");
    println!("| raw group | {:.2} | |", median(r) * 1e6);
    println!(
        "| cuda-stream Group | {:.2} | {:.3} |",
        median(sf) * 1e6,
        median(ratios)
    );
    Ok(())
}

/// Where the safe group's host time goes at 1 MiB while the GPU works (batches as in the rows,
/// the two sides' batches alternating): the crate's phase totals per group
/// (`cuda_stream::nccl::phases`, whose marks read the clock), against the raw group's
/// `ncclGroupStart` .. `ncclGroupEnd` timed alone in the same way. Built with the benchmark's
/// `phases` feature only (a diagnosis: it turns on `cuda-stream`'s `test-hooks`).
#[cfg(feature = "phases")]
fn phase_costs(
    safe: &mut Body<'_>,
    raw_timed: &mut dyn FnMut() -> Result<f64, Error>,
    sync: &dyn Fn() -> Result<(), Error>,
    iters: u32,
    reps: usize,
) -> Result<(), Error> {
    use cuda_stream::nccl::phases;
    let _ = phases::take();
    let (mut raw_s, mut raw_groups) = (0.0, 0u64);
    for _ in 0..reps {
        sync()?;
        for _ in 0..iters {
            safe()?;
        }
        sync()?;
        for _ in 0..iters {
            raw_s += raw_timed()?;
            raw_groups += 1;
        }
        sync()?;
    }
    let (totals, groups) = phases::take();
    println!();
    println!(
        "Probe: the safe group's host time by phase at 1 MiB while the GPU works ({groups} groups; each mark reads the clock), and the raw group timed alone ({raw_groups} groups)"
    );
    println!();
    println!("| phase | ns per group |");
    println!("| --- | --- |");
    let per = |ns: u64| ns as f64 / groups.max(1) as f64;
    for (name, ns) in phases::NAMES.iter().zip(totals) {
        println!("| {name} | {:.0} |", per(ns));
    }
    println!("| all phases | {:.0} |", per(totals.iter().sum()));
    println!(
        "| raw: ncclGroupStart, the calls, ncclGroupEnd | {:.0} |",
        raw_s * 1e9 / raw_groups.max(1) as f64
    );
    Ok(())
}

/// A probe of where the safe side's time goes at 1 MiB: the host's time to enqueue one group
/// (the loop alone, the GPU's work excluded) for the raw group, the raw group with the safe
/// side's checks, the raw group bound to the first rank's context as the crate binds it
/// (`cuCtxGetCurrent`, push, group, pop, `cuCtxGetCurrent`), and the safe group; with the
/// thread's current context before and after each.
#[cfg(feature = "nccl")]
fn host_costs(
    raw: &mut Body<'_>,
    checked: &mut Body<'_>,
    safe: &mut Body<'_>,
    first: &Context,
    iters: u32,
    reps: usize,
    sync: &dyn Fn() -> Result<(), Error>,
) -> Result<(), Error> {
    let get_current = sys::fns::cuCtxGetCurrent().map_err(Error::Load)?;
    let push = sys::fns::cuCtxPushCurrent().map_err(Error::Load)?;
    let pop = sys::fns::cuCtxPopCurrent().map_err(Error::Load)?;
    let current = || {
        let mut c = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { get_current(&mut c) };
        c as usize
    };
    let ctx0 = first.raw();
    let run = |f: &mut dyn FnMut() -> Result<(), Error>| -> Result<(f64, usize, usize), Error> {
        sync()?;
        let before = current();
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        let host = t.elapsed().as_secs_f64() / f64::from(iters);
        let after = current();
        sync()?;
        Ok((host, before, after))
    };
    let measure = |name: &str, f: &mut dyn FnMut() -> Result<(), Error>| -> Result<(), Error> {
        run(f)?;
        let mut times = Vec::new();
        let (mut b, mut a) = (0, 0);
        for _ in 0..reps {
            let (t, before, after) = run(f)?;
            times.push(t);
            (b, a) = (before, after);
        }
        println!("| {name} | {:.2} | {b:#x} / {a:#x} |", median(times) * 1e6);
        Ok(())
    };
    println!();
    println!(
        "Probe: the host's time to enqueue one all-reduce group of 1 MiB per rank (the enqueue loop alone, median of {reps} batches of {iters}); the first rank's context is {:#x}",
        ctx0 as usize
    );
    println!();
    println!("| body | host us per group | current context before / after a batch |");
    println!("| --- | --- | --- |");
    measure("raw group", &mut **raw)?;
    measure("raw + the safe side's checks", &mut **checked)?;
    measure("raw, bound to the first context (push, pop)", &mut || {
        // SAFETY: a live context, pushed and popped around the group as the crate's binding
        // does; valid out-pointers.
        unsafe {
            let mut c = std::ptr::null_mut();
            get_current(&mut c);
            push(ctx0);
            let r = raw();
            let mut popped = std::ptr::null_mut();
            pop(&mut popped);
            get_current(&mut c);
            r
        }
    })?;
    measure("cuda-stream Group", &mut **safe)?;
    Ok(())
}

/// Pins the measuring thread to `cpu` (`--pin-cpu`), saying so; after NCCL's initialisation in
/// the multi-GPU rows, so that the threads NCCL starts keep the process's CPUs.
fn pin_after_init(cpu: Option<usize>) -> Result<(), Error> {
    let Some(cpu) = cpu else { return Ok(()) };
    crate::pin::pin_this_thread(cpu).map_err(|reason| Error::InvalidArgument { reason })?;
    println!("the measuring thread pinned to CPU {cpu} (after NCCL's initialisation)");
    Ok(())
}

/// `--multi-gpu`: the two-GPU rows; `Ok(false)` (with the reason printed) on fewer than two.
pub(crate) fn multi_gpu(quick: bool, pin_cpu: Option<usize>) -> Result<bool, Error> {
    let n = Device::count()?;
    if n < 2 {
        println!("skipped: the multi-GPU rows need 2 GPUs, this machine has {n}");
        return Ok(false);
    }
    let (c0, c1) = (Context::primary(0)?, Context::primary(1)?);
    println!(
        "Multi-GPU rows: GPU 0 {}, GPU 1 {}; NCCL_NVLS_ENABLE={}",
        c0.device().name()?,
        c1.device().name()?,
        std::env::var("NCCL_NVLS_ENABLE").unwrap_or_else(|_| "(unset)".into())
    );
    let reps = if quick { 2 } else { 8 };
    #[cfg(feature = "nccl")]
    if let Err(e) = collectives::all_reduce_rows(&[c0.clone(), c1.clone()], quick, reps, pin_cpu) {
        println!("all-reduce rows failed: {}", chain(&e));
        return Err(e);
    }
    // Without NCCL the thread is pinned here (with it, after NCCL's initialisation).
    #[cfg(not(feature = "nccl"))]
    pin_after_init(pin_cpu)?;
    peer_rows(&c0, &c1, quick, reps)?;
    Ok(true)
}

/// The one-GPU rows at the end of a normal run: all-reduce on one rank against raw NCCL
/// (skipped, saying why, without NCCL).
pub(crate) fn one_gpu(ctx: &Context, quick: bool) {
    #[cfg(feature = "nccl")]
    {
        let reps = if quick { 2 } else { 8 };
        if let Err(e) = collectives::all_reduce_rows(std::slice::from_ref(ctx), quick, reps, None) {
            println!();
            println!("NCCL rows skipped: {}", chain(&e));
        }
    }
    #[cfg(not(feature = "nccl"))]
    {
        let _ = (ctx, quick, chain as fn(&dyn std::error::Error) -> String);
        println!();
        println!("NCCL rows skipped: built without the nccl feature");
    }
}
