//! An executor awaiting GPU work without blocking its thread: a single-threaded, std-only
//! executor runs tasks that await `Stream::completed()` next to a CPU task that keeps running
//! while the GPU works. Nothing here is specific to this executor: the futures only use
//! `std::task::Waker`, as tokio's or any other runtime's tasks would.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use cuda_stream_tests::{DeviceBuffer, Kernels, gpu};

const SPIN: Duration = Duration::from_millis(200);

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Tasks woken since the last turn, by index; the executor thread parks when none is.
struct Ready {
    queue: Mutex<VecDeque<usize>>,
    thread: Thread,
}

struct TaskWaker {
    id: usize,
    ready: Arc<Ready>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.queue.lock().unwrap().push_back(self.id);
        self.ready.thread.unpark();
    }
}

/// Runs every task to completion on the calling thread. Returns how many times it parked.
fn run(tasks: Vec<Task>) -> usize {
    let ready = Arc::new(Ready {
        queue: Mutex::new((0..tasks.len()).collect()),
        thread: std::thread::current(),
    });
    let mut tasks: Vec<Option<Task>> = tasks.into_iter().map(Some).collect();
    let mut left = tasks.len();
    let mut parks = 0;
    while left > 0 {
        let next = ready.queue.lock().unwrap().pop_front();
        let Some(id) = next else {
            parks += 1;
            std::thread::park();
            continue;
        };
        let Some(task) = tasks[id].as_mut() else {
            continue;
        };
        let waker = Waker::from(Arc::new(TaskWaker {
            id,
            ready: ready.clone(),
        }));
        if task
            .as_mut()
            .poll(&mut TaskContext::from_waker(&waker))
            .is_ready()
        {
            tasks[id] = None;
            left -= 1;
        }
    }
    parks
}

/// Yields once to the executor, so other tasks run.
fn yield_now() -> impl Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
}

#[test]
fn a_cpu_task_keeps_running_while_another_awaits_the_gpu() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let stream = ctx.new_stream().unwrap();
    // The GPU work waits behind a host function that the CPU task lets go after its 100th turn,
    // so those turns must run while the other task awaits the work. A thread blocked in the
    // await would never get there: the host function then gives up after 60 s (a hang guard) and
    // says so.
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let (gave_up_tx, gave_up) = std::sync::mpsc::channel();
    {
        let gate = gate.clone();
        stream
            .launch_host_func(move || {
                let (open, opened) = &*gate;
                let (open, timeout) = opened
                    .wait_timeout_while(open.lock().unwrap(), Duration::from_secs(60), |o| !*o)
                    .unwrap();
                gave_up_tx.send(!*open && timeout.timed_out()).unwrap();
            })
            .unwrap();
    }
    k.store_after_spin(&stream, buf.ptr(), 9, SPIN);
    let completion = stream.completed();

    let gpu_done = Rc::new(RefCell::new(None::<Instant>));
    let finished = Arc::new(AtomicBool::new(false));
    let cpu_turns = Rc::new(RefCell::new(0u64));
    let start = Instant::now();

    let (done, fin) = (gpu_done.clone(), finished.clone());
    let waiter: Task = Box::pin(async move {
        completion.await.unwrap();
        *done.borrow_mut() = Some(Instant::now());
        fin.store(true, Ordering::SeqCst);
    });
    let (turns, fin) = (cpu_turns.clone(), finished.clone());
    let worker: Task = Box::pin(async move {
        // CPU work on the same thread, yielding between steps, until the GPU task is done.
        while !fin.load(Ordering::SeqCst) {
            *turns.borrow_mut() += 1;
            if *turns.borrow() == 100 {
                let (open, opened) = &*gate;
                *open.lock().unwrap() = true;
                opened.notify_all();
            }
            std::hint::black_box((0..1_000u64).sum::<u64>());
            yield_now().await;
        }
    });
    run(vec![waiter, worker]);

    let gpu_at = gpu_done.borrow().expect("the GPU task finished");
    let turns = *cpu_turns.borrow();
    println!(
        "the GPU task finished after {:?}; the CPU task ran {turns} turns on the same thread meanwhile",
        gpu_at - start
    );
    assert!(
        gpu_at - start >= SPIN * 9 / 10,
        "resolved before the work: {:?}",
        gpu_at - start
    );
    assert!(
        !gave_up.recv().unwrap(),
        "the thread was blocked: the CPU task never let the GPU work start"
    );
    assert!(
        turns >= 100,
        "the GPU task resolved after only {turns} CPU turns"
    );
    assert!(stream.query().unwrap());
    assert_eq!(buf.get(0), 9);
}

#[test]
fn one_thread_awaits_many_streams_and_parks_while_all_are_pending() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let streams: Vec<_> = (0..8).map(|_| ctx.new_stream().unwrap()).collect();
    let buf = DeviceBuffer::new(&ctx, streams.len());
    let order = Rc::new(RefCell::new(Vec::new()));
    let mut tasks: Vec<Task> = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        // Stream i finishes after (i + 1) * 20 ms.
        let spin = Duration::from_millis(20 * (i as u64 + 1));
        k.store_after_spin(s, buf.ptr() + 4 * i as u64, i as u32 + 1, spin);
        let completion = s.completed();
        let order = order.clone();
        tasks.push(Box::pin(async move {
            completion.await.unwrap();
            order.borrow_mut().push(i);
        }));
    }
    let parks = run(tasks);
    let order = order.borrow().clone();
    println!("completion order {order:?}; the executor parked {parks} times");
    assert_eq!(order.len(), streams.len());
    // Spins 20 ms apart finish in order of length.
    assert_eq!(order, (0..streams.len()).collect::<Vec<_>>());
    // It slept while the GPU worked instead of spinning: far fewer parks than polls would be.
    assert!(
        parks >= 1 && parks <= 2 * streams.len(),
        "parked {parks} times"
    );
    for i in 0..streams.len() {
        assert_eq!(buf.get(i), i as u32 + 1);
    }
}
