//! Kernel launches (`0x07..`), within the launch rate quota.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{failed, invalid, Done, Session};
use vmgpu_cuda_api::LaunchConfig;
use vmgpu_cuda_api::LaunchKind;
use vmgpu_cuda_proto::{FunctionId, KernelParams, ReplyBody, Status, StreamId};

impl Session {
    /// `LaunchKernel` (`LaunchCooperativeKernel`: `cooperative`): parameters packed by
    /// the kernel's layout (checked against it), or an opaque buffer split by it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_kernel(
        &mut self,
        cx: u64,
        function: FunctionId,
        cfg: LaunchConfig,
        stream: StreamId,
        params: &KernelParams,
        cooperative: bool,
    ) -> Done {
        self.launch_quota();
        let f = Self::found(&self.functions, "function", function.0, cx)?;
        let args: Vec<&[u8]> = if params.is_opaque() {
            let Some(layout) = &f.layout else {
                return Err(invalid(
                    "an opaque parameter buffer for a kernel whose layout is unknown",
                ));
            };
            let mut args = Vec::with_capacity(layout.len());
            for s in layout {
                let a = params
                    .bytes
                    .get(s.offset as usize..(s.offset as usize).saturating_add(s.size as usize));
                match a {
                    Some(a) => args.push(a),
                    None => {
                        return Err(invalid(format!(
                            "the parameter buffer ({} bytes) ends before the parameter at {}+{}",
                            params.bytes.len(),
                            s.offset,
                            s.size
                        )))
                    }
                }
            }
            args
        } else {
            let Some(layout) = &f.layout else {
                return Err(failed(
                    Status::ERROR_NOT_SUPPORTED,
                    "the kernel's parameter layout is unknown",
                ));
            };
            if layout.len() != params.slots.len()
                || layout
                    .iter()
                    .zip(&params.slots)
                    .any(|(a, b)| a.size != b.size)
            {
                return Err(invalid(format!(
                    "the kernel takes {} parameters of sizes {:?}; the launch gives {} of sizes {:?}",
                    layout.len(),
                    layout.iter().map(|s| s.size).collect::<Vec<_>>(),
                    params.slots.len(),
                    params.slots.iter().map(|s| s.size).collect::<Vec<_>>()
                )));
            }
            params.args()
        };
        let st = self.stream(cx, stream)?;
        let be = self.backend()?;
        // SAFETY: the arguments match the kernel's parameter list as read from its PTX
        // (checked above; the simulator checks again); the module stays loaded until
        // the launch is done (an unload synchronises the context first); device
        // addresses inside the kernel are the current context's: an address outside its
        // allocations faults in that context only (the device's address translation);
        // the host memory it may reach is what this context registered: the guest's own
        // RAM.
        unsafe { be.launch_kind(LaunchKind::of(cooperative), &f.function, &cfg, st, &args)? };
        Ok(ReplyBody::Empty)
    }

    /// Takes a launch token, waiting for one when the guest is over its launch rate
    /// (only this guest's thread waits). The wait is cut short when the guest is gone.
    fn launch_quota(&mut self) {
        let Some(rate) = self.quota.launches_per_sec.filter(|r| *r > 0) else {
            return;
        };
        let rate = f64::from(rate);
        let burst = f64::from(self.quota.launch_bucket());
        let mut waited = false;
        loop {
            let now = Instant::now();
            self.tokens =
                (self.tokens + now.duration_since(self.refilled).as_secs_f64() * rate).min(burst);
            self.refilled = now;
            if self.tokens >= 1.0 || self.gone.is_cancelled() {
                break;
            }
            if !waited {
                waited = true;
                self.inner.stats.throttled.fetch_add(1, Ordering::Relaxed);
                if self
                    .last_throttle_log
                    .is_none_or(|t| now.duration_since(t) > Duration::from_secs(5))
                {
                    log::warn!(
                        "guest {} (session {}): launch quota of {}/s hit; its launches are throttled",
                        self.guest,
                        self.id,
                        rate
                    );
                    self.last_throttle_log = Some(now);
                }
            }
            // In slices, so a guest that goes away is noticed.
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / rate);
            std::thread::sleep(wait.min(Duration::from_millis(50)));
        }
        self.tokens -= 1.0;
    }
}
