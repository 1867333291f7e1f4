//! `/dev/kmsg` records and the kernel's clock.
//!
//! A record is one line `PRIORITY,SEQUENCE,TIMESTAMP_US,FLAGS[,...];TEXT`, then optional
//! continuation lines that start with a space (` SUBSYSTEM=pci`, ...); `TIMESTAMP_US` is
//! microseconds since boot. [`BootClock`] turns it into wall-clock time the way
//! `dmesg --ctime` does (boot time = CLOCK_REALTIME − CLOCK_BOOTTIME, read once), so a record
//! and the same line in a saved `dmesg -T` agree.

use crate::model::TsMs;

/// One record's header fields and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub seq: u64,
    /// Microseconds since boot.
    pub ts_us: u64,
    pub text: &'a str,
}

/// Reads a record line (without its newline); `None` for a continuation line or anything
/// that is not a record.
pub fn parse(line: &str) -> Option<Record<'_>> {
    if line.starts_with(' ') {
        return None;
    }
    let (header, text) = line.split_once(';')?;
    let mut fields = header.split(',');
    let _priority: u32 = fields.next()?.parse().ok()?;
    let seq = fields.next()?.parse().ok()?;
    let ts_us = fields.next()?.parse().ok()?;
    Some(Record { seq, ts_us, text })
}

/// Wall-clock time of kernel timestamps, read once when the log is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootClock {
    /// CLOCK_REALTIME − CLOCK_BOOTTIME, µs: when the machine booted.
    boot_us: i64,
    /// CLOCK_BOOTTIME when the log was opened, µs: records up to here were already there.
    opened_us: i64,
}

impl BootClock {
    /// Reads the clocks now.
    pub fn now() -> std::io::Result<BootClock> {
        let real = clock_us(libc::CLOCK_REALTIME)?;
        let boot = clock_us(libc::CLOCK_BOOTTIME)?;
        Ok(BootClock {
            boot_us: real - boot,
            opened_us: boot,
        })
    }

    /// A clock with a given boot time (ms UTC) and open time (µs since boot), for tests.
    pub fn fixed(boot_ms: TsMs, opened_us: i64) -> BootClock {
        BootClock {
            boot_us: boot_ms * 1000,
            opened_us,
        }
    }

    /// The wall-clock time (ms UTC) of a kernel timestamp.
    pub fn wall_ms(&self, ts_us: u64) -> TsMs {
        let ts = i64::try_from(ts_us).unwrap_or(i64::MAX);
        self.boot_us.saturating_add(ts).div_euclid(1000)
    }

    /// Whether a record was in the kernel's buffer when the log was opened (history).
    pub fn before_open(&self, ts_us: u64) -> bool {
        i64::try_from(ts_us).is_ok_and(|t| t <= self.opened_us)
    }
}

fn clock_us(clock: libc::clockid_t) -> std::io::Result<i64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into memory we own.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_records_and_skips_continuations() {
        let r =
            parse("4,1234,5678901234,-;NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, m").unwrap();
        assert_eq!((r.seq, r.ts_us), (1234, 5_678_901_234));
        assert_eq!(r.text, "NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, m");
        // Extra header fields (caller id on newer kernels) and `;` in the text.
        let r = parse("6,7,8,c,caller=T1;a;b").unwrap();
        assert_eq!((r.seq, r.ts_us, r.text), (7, 8, "a;b"));
        assert_eq!(parse(" SUBSYSTEM=pci"), None);
        assert_eq!(parse("no header"), None);
        assert_eq!(parse("x,1,2,-;text"), None);
    }

    #[test]
    fn kernel_time_becomes_wall_time() {
        let c = BootClock::fixed(1_700_000_000_000, 5_000_000);
        assert_eq!(c.wall_ms(0), 1_700_000_000_000);
        assert_eq!(c.wall_ms(1_234_567), 1_700_000_001_234);
        assert!(c.before_open(5_000_000) && !c.before_open(5_000_001));
        let now = BootClock::now().unwrap();
        let wall = now.wall_ms(u64::try_from(now.opened_us).unwrap());
        assert!((wall - crate::clock::now_ms()).abs() < 5_000, "{wall}");
    }
}
