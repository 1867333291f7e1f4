//! Headless Chromium for the tests that check what a browser shows (the live page, the HTML
//! report): Debian's `chromium-headless-shell` or `chromium`, which scripts/test.sh installs.

use std::path::Path;
use std::process::Command;

fn chromium() -> &'static str {
    for c in ["chromium-headless-shell", "chromium"] {
        if Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return c;
        }
    }
    panic!(
        "headless Chromium is needed (Debian: apt-get install chromium-headless-shell; scripts/test.sh installs it)"
    );
}

/// `url` in a 1200 x 900 window with its own profile under `profile`, after 10 s of virtual
/// time; `extra` flags (`--dump-dom`, `--screenshot=FILE`). Its stdout.
pub fn browse(url: &str, profile: &Path, extra: &[&str]) -> String {
    let o = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--allow-file-access-from-files",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=10000", "--window-size=1200,900"])
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}
