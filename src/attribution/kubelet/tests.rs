//! The client against a pod-resources server on a unix socket: the join, MIG devices, a
//! kubelet that is missing, down, hanging or denies access, and a pod that moves.

use std::time::Duration;

use super::client::{self, KubeletError};
use super::proto::*;
use super::server::{self, PodList};
use super::{Allocation, allocations, device_uuid};

fn pod(name: &str, ns: &str, container: &str, resource: &str, ids: &[&str]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: ids.iter().map(|s| s.to_string()).collect(),
            }],
        }],
    }
}

fn list(pods: Vec<PodResources>) -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: pods,
    }
}

const GPU0: &str = "GPU-5a7f9c2e-1b3d-4e6f-8a9b-0c1d2e3f4a5b";
const GPU1: &str = "GPU-6b8fad3f-2c4e-4f70-9bac-1d2e3f4a5b6c";
const MIG: &str = "MIG-9f2c1a7e-3b4d-5e6f-7a8b-9c0d1e2f3a4b";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn gpus_and_mig_devices_map_to_their_pods() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("kubelet.sock");
    let pods = PodList::default();
    pods.set(list(vec![
        pod(
            "llm-ft-7",
            "research",
            "trainer",
            "nvidia.com/gpu",
            &[GPU0, GPU1],
        ),
        pod(
            "notebook-3",
            "dev",
            "jupyter",
            "nvidia.com/mig-1g.10gb",
            &[MIG],
        ),
        // Not a GPU: ignored.
        pod(
            "net",
            "kube-system",
            "sriov",
            "intel.com/sriov",
            &["0000:3b:00.1"],
        ),
    ]));
    let rt = rt();
    rt.block_on(async {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn({
            let (sock, pods) = (sock.clone(), pods.clone());
            async move {
                server::serve(&sock, pods, async {
                    let _ = stop_rx.await;
                })
                .await
            }
        });
        while !sock.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let a = allocations(
            &client::list(&sock, Duration::from_secs(10))
                .await
                .expect("list"),
        );
        assert_eq!(a.len(), 3, "{a:?}");
        let want = |pod: &str, ns: &str, c: &str, r: &str| Allocation {
            pod: pod.into(),
            namespace: ns.into(),
            container: c.into(),
            resource: r.into(),
            job: None,
        };
        assert_eq!(
            a[GPU0],
            want("llm-ft-7", "research", "trainer", "nvidia.com/gpu")
        );
        assert_eq!(a[GPU1], a[GPU0]);
        assert_eq!(
            a[MIG],
            want("notebook-3", "dev", "jupyter", "nvidia.com/mig-1g.10gb")
        );

        // The pod moves: GPU1 is now another pod's.
        pods.set(list(vec![pod(
            "llm-ft-8",
            "research",
            "trainer",
            "nvidia.com/gpu",
            &[GPU1],
        )]));
        let a = allocations(
            &client::list(&sock, Duration::from_secs(10))
                .await
                .expect("list"),
        );
        assert_eq!(a.get(GPU0), None, "released");
        assert_eq!(a[GPU1].pod, "llm-ft-8");

        // A kubelet that hangs costs the deadline, no more.
        pods.set_delay(Some(Duration::from_secs(30)));
        let start = std::time::Instant::now();
        let e = client::list(&sock, Duration::from_millis(300))
            .await
            .expect_err("hangs");
        assert!(matches!(e, KubeletError::Timeout { .. }), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
        pods.set_delay(None);

        // The kubelet goes down (restart): the socket file stays, nobody answers.
        let _ = stop_tx.send(());
        serving.await.expect("join").expect("served");
        let e = client::list(&sock, Duration::from_secs(5))
            .await
            .expect_err("down");
        assert!(matches!(e, KubeletError::Connect { .. }), "{e}");
        assert!(e.to_string().contains("kubelet.sock"), "{e}");
    });
}

#[test]
fn a_missing_socket_says_where_and_what_to_mount() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("absent.sock");
    let e = rt()
        .block_on(client::list(&sock, Duration::from_secs(1)))
        .expect_err("missing");
    assert!(matches!(e, KubeletError::Missing(_)), "{e}");
    assert!(e.to_string().contains("absent.sock"), "{e}");
    let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
    let e = client::classify(&sock, &denied);
    assert!(matches!(e, KubeletError::Permission(_)), "{e}");
    assert!(e.to_string().contains("pod-resources"), "{e}");
}

/// The watcher publishes the kubelet's answer, and a start waits for the first one at most
/// its bound: at once when it answers or the socket is missing, the bound when it hangs.
#[test]
fn a_start_waits_for_the_first_answer_within_its_bound() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = Arc::new(AtomicBool::new(false));

    let missing = super::watch::spawn(dir.path().join("absent.sock"), true, None, stop.clone())
        .expect("spawn");
    assert!(
        missing.wait_first_answer(Duration::from_secs(10)),
        "a failure settles too"
    );
    assert_eq!(missing.changed_since(&mut 0), None);

    let sock = dir.path().join("kubelet.sock");
    let pods = PodList::default();
    pods.set(list(vec![pod(
        "llm-ft-7",
        "research",
        "trainer",
        "nvidia.com/gpu",
        &[GPU0],
    )]));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let listener = rt
        .block_on(async { tokio::net::UnixListener::bind(&sock) })
        .expect("bind");
    let serving = rt.spawn(server::serve_listener(listener, pods.clone(), async {
        let _ = stop_rx.await;
    }));
    let view = super::watch::spawn(sock.clone(), true, None, stop.clone()).expect("spawn");
    let start = std::time::Instant::now();
    assert!(view.wait_first_answer(Duration::from_secs(10)));
    assert!(start.elapsed() < Duration::from_secs(5));
    let a = view.changed_since(&mut 0).expect("published");
    assert_eq!(a[GPU0].pod, "llm-ft-7");

    pods.set_delay(Some(Duration::from_secs(30)));
    let hung = super::watch::spawn(sock, true, None, stop.clone()).expect("spawn");
    let start = std::time::Instant::now();
    assert!(
        !hung.wait_first_answer(Duration::from_millis(300)),
        "still waiting"
    );
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    pods.set_delay(None);
    let _ = stop_tx.send(());
    rt.block_on(serving).expect("join").expect("served");
}

/// The watcher's session keeps its connection across calls (a moved pod shows on the same
/// connection) and connects again after the kubelet restarts.
#[test]
fn a_session_survives_a_kubelet_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("kubelet.sock");
    let pods = PodList::default();
    pods.set(list(vec![pod(
        "llm-ft-7",
        "research",
        "trainer",
        "nvidia.com/gpu",
        &[GPU0],
    )]));
    rt().block_on(async {
        let start = |pods: PodList| {
            let sock = sock.clone();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
            let serving = tokio::spawn(server::serve_listener(listener, pods, async {
                let _ = rx.await;
            }));
            (tx, serving)
        };
        let mut s = client::Session::new(&sock);
        let (stop, serving) = start(pods.clone());
        let a = allocations(&s.list(Duration::from_secs(5)).await.expect("list"));
        assert_eq!(a[GPU0].pod, "llm-ft-7");
        pods.set(list(vec![pod(
            "llm-ft-8",
            "research",
            "trainer",
            "nvidia.com/gpu",
            &[GPU0],
        )]));
        let a = allocations(&s.list(Duration::from_secs(5)).await.expect("list"));
        assert_eq!(a[GPU0].pod, "llm-ft-8", "the same session sees the change");

        let _ = stop.send(());
        serving.await.expect("join").expect("served");
        std::fs::remove_file(&sock).expect("the old socket");
        assert!(s.list(Duration::from_secs(2)).await.is_err(), "down");
        let (stop, serving) = start(pods.clone());
        let a = allocations(&s.list(Duration::from_secs(5)).await.expect("after restart"));
        assert_eq!(a[GPU0].pod, "llm-ft-8");
        let _ = stop.send(());
        serving.await.expect("join").expect("served");
    });
}

/// `[kubernetes] kubelet_pods`: the watcher names each allocated pod's job from the kubelet's
/// `/pods`; when the kubelet refuses (no nodes/proxy), the allocations still come, without.
#[test]
fn the_watcher_names_each_pods_job_from_the_kubelets_pods() {
    use super::pods::fixture::{POD_LIST, serve};
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "t0k3n").expect("token");
    let pods = PodList::default();
    pods.set(list(vec![
        pod(
            "llama-worker-3",
            "research",
            "trainer",
            "nvidia.com/gpu",
            &[GPU0],
        ),
        pod("notebook", "dev", "jupyter", "nvidia.com/gpu", &[GPU1]),
    ]));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut stops = Vec::new();
    for (status, want) in [(200, Some("llama")), (403, None)] {
        let sock = dir.path().join(format!("kubelet-{status}.sock"));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let listener = rt
            .block_on(async { tokio::net::UnixListener::bind(&sock) })
            .expect("bind");
        rt.spawn(server::serve_listener(listener, pods.clone(), async {
            let _ = stop_rx.await;
        }));
        stops.push(stop_tx);
        let body = if status == 200 { POD_LIST } else { "{}" };
        let (url, auth) = serve(status, body);
        let cfg = crate::config::KubeletPods {
            url,
            token_file: token.clone(),
            ca_file: None,
            insecure_skip_verify: false,
        };
        let view = super::watch::spawn(sock, true, Some(cfg), stop.clone()).expect("spawn");
        assert!(view.wait_first_answer(Duration::from_secs(10)));
        let a = view.changed_since(&mut 0).expect("published");
        assert_eq!(a[GPU0].pod, "llama-worker-3", "{status}");
        assert_eq!(a[GPU0].job.as_deref(), want, "{status}");
        assert_eq!(a[GPU1].job, None, "a bare pod names no job");
        assert_eq!(auth.recv().expect("asked"), "Bearer t0k3n");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in stops {
        let _ = s.send(());
    }
}

#[test]
fn time_sliced_replicas_are_their_gpu_and_the_first_pod_names_it() {
    let a = allocations(&list(vec![
        pod("nb-a", "team-a", "main", "nvidia.com/gpu", &["GPU-1111::0"]),
        pod("nb-b", "team-b", "main", "nvidia.com/gpu", &["GPU-1111::1"]),
        pod(
            "mig",
            "team-c",
            "main",
            "nvidia.com/mig-1g.10gb",
            &["MIG-2222"],
        ),
    ]));
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a["GPU-1111"].pod, "nb-a");
    assert_eq!(a["MIG-2222"].pod, "mig");
    // Not a replica suffix: kept as it is.
    assert_eq!(device_uuid("GPU-1111::x"), "GPU-1111::x");
}
