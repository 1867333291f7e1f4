//! What gpuwatch talks to, reached without sending anything: the rules it loads, the kubelet's
//! socket, and every receiver (email's SMTP server, each Alertmanager, a Slack URL).

use std::process::Command;

use super::fixture::*;

#[test]
fn rules_that_do_not_load_and_a_kubelet_socket_that_refuses_fail() {
    let h = Host::healthy(TWO_H100);
    h.write(
        "rules/bad.toml",
        "[[rule]]\nname = \"x\"\ncondition = \"gpu_util >\"\n",
    );
    let sock = h.path("kubelet.sock");
    // A socket file left by a kubelet that is gone: connecting is refused.
    drop(std::os::unix::net::UnixListener::bind(&sock).expect("bind"));
    let cfg = h.path("rules.toml");
    std::fs::write(
        &cfg,
        format!(
            "database = \"{}\"\n[rules]\nfiles = [\"rules/bad.toml\"]\n[processes]\nenabled = false\n\
             [kubernetes]\nenabled = \"auto\"\npod_resources_socket = \"{}\"\n",
            h.path("var/g.db").display(),
            sock.display()
        ),
    )
    .expect("config");
    let o = h.doctor(&cfg, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "config",
        "fail",
        "the rules do not load",
        "gpuwatch rules check",
    );
    expect(&c, "kubelet", "fail", "cannot connect to", "pod-resources");
}

#[test]
fn email_and_alertmanager_receivers_are_reached_by_tcp_only() {
    let h = Host::healthy(TWO_H100);
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let listening = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let open = listening.local_addr().expect("addr").port();
    let receivers = |smtp: u16, am: u16| {
        format!(
            "[[notify.email]]\nname = \"team\"\nsmtp_host = \"127.0.0.1\"\nsmtp_port = {smtp}\ntls = \"none\"\n\
             from = \"gpuwatch@example.com\"\nto = [\"oncall@example.com\"]\n\
             [[notify.alertmanager]]\nname = \"fleet\"\nurls = [\"http://127.0.0.1:{open}\", \"http://127.0.0.1:{am}\"]\n\
             [[notify.slack]]\nname = \"chat\"\nwebhook_url_env = \"GPUWATCH_DOCTOR_TEST_SLACK_URL\"\n"
        )
    };
    let run = |cfg: &std::path::Path, slack: &str| {
        Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
            .args(["doctor", "--format", "json", "--host-root"])
            .arg(h.dir.path())
            .arg("--config")
            .arg(cfg)
            .env_remove("LD_LIBRARY_PATH")
            .env("GPUWATCH_DOCTOR_TEST_SLACK_URL", slack)
            .output()
            .expect("doctor")
    };
    let cfg = h.config("");
    let base = std::fs::read_to_string(&cfg).expect("read");
    std::fs::write(&cfg, format!("{base}{}", receivers(closed, closed))).expect("config");
    let o = run(&cfg, "hooks.slack.com/services/T0/B0/s3cr3t");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "receiver team",
        "fail",
        &format!("email: cannot connect to SMTP 127.0.0.1:{closed}"),
        "gpuwatch notify test",
    );
    expect(
        &c,
        "receiver fleet",
        "fail",
        &format!("alertmanager: 127.0.0.1:{closed}"),
        "the network path",
    );
    let fleet = check(&c, "receiver fleet")["found"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        !fleet.contains(&open.to_string()),
        "only the closed one: {fleet}"
    );
    expect(
        &c,
        "receiver chat",
        "fail",
        "slack: not a URL",
        "network path",
    );
    assert!(
        !text(&o).contains("s3cr3t"),
        "a secret URL is never printed"
    );

    std::fs::write(&cfg, format!("{base}{}", receivers(open, open))).expect("config");
    let o = run(
        &cfg,
        &format!("http://127.0.0.1:{open}/services/T0/B0/s3cr3t"),
    );
    let c = json(&o);
    expect(
        &c,
        "receiver team",
        "ok",
        &format!("email: SMTP 127.0.0.1:{open} accepts TCP connections (nothing sent)"),
        "",
    );
    expect(
        &c,
        "receiver fleet",
        "ok",
        &format!("127.0.0.1:{open}, 127.0.0.1:{open} accept TCP connections (nothing sent)"),
        "",
    );
    expect(&c, "receiver chat", "ok", "accepts TCP connections", "");
    // Nothing was sent: every connection the doctor made closed without a byte.
    listening.set_nonblocking(true).expect("nonblocking");
    let mut accepted = 0;
    while let Ok((mut s, _)) = listening.accept() {
        use std::io::Read;
        s.set_nonblocking(false).expect("blocking");
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).expect("read");
        assert!(buf.is_empty(), "the doctor sent {buf:?}");
        accepted += 1;
    }
    assert!(accepted >= 3, "{accepted} connections");
}
