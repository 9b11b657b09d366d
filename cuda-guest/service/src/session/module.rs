//! Modules and their functions (`0x03..`), in the current context: PTX images within
//! the module size, object, memory (their `.global`/`.const` variables) and module
//! host memory quotas; one function handle per module and kernel name.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

use super::{failed, invalid, Done, Session};
use vmgpu_cuda_api::{Function, FunctionAttribute, Module};
use vmgpu_cuda_proto::{FunctionId, FunctionInfo, ModuleId, ParamLayout, ReplyBody, Status};
use vmgpu_ptx::Space;

/// A loaded module.
#[derive(Debug)]
pub(in crate::session) struct ModuleEntry {
    pub(in crate::session) module: Module,
    /// Parameter layouts of the module's kernels, read from its PTX.
    layouts: HashMap<String, Vec<ParamLayout>>,
    /// The function handle given out for each kernel name (one per name, as the driver
    /// gives one `CUfunction`).
    functions: HashMap<String, u64>,
    /// Device memory its `.global`/`.const` variables hold (counted in `mem_used`).
    pub(in crate::session) device_bytes: u64,
    /// Host memory the service holds for it (counted in `host_used`).
    pub(in crate::session) host_bytes: u64,
    /// Its variables whose address the guest asked for (`ModuleGetGlobal`): base to
    /// size. Copies and memsets reach them until the module goes.
    pub(in crate::session) variables: BTreeMap<u64, u64>,
}

/// A kernel of a loaded module.
#[derive(Debug)]
pub(in crate::session) struct FunctionEntry {
    pub(in crate::session) function: Function,
    /// Its module's handle.
    pub(in crate::session) module: u64,
    /// Its parameter layout, when known (the backend's, else read from the PTX).
    pub(in crate::session) layout: Option<Vec<ParamLayout>>,
}

impl Session {
    /// `ModuleLoadData` of a PTX image.
    pub(super) fn module_load(&mut self, cx: u64, image: Vec<u8>) -> Done {
        if image.len() > self.quota.max_module_bytes as usize {
            log::warn!(
                "guest {} (session {}): module size quota hit ({} bytes, at most {})",
                self.guest,
                self.id,
                image.len(),
                self.quota.max_module_bytes
            );
            return Err(failed(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: a module of {} bytes is over its quota of {} bytes",
                    self.guest,
                    image.len(),
                    self.quota.max_module_bytes
                ),
            ));
        }
        self.object_quota("module")?;
        let text = image.strip_suffix(&[0]).unwrap_or(&image);
        let Ok(text) = std::str::from_utf8(text) else {
            return Err(failed(
                Status::ERROR_INVALID_IMAGE,
                "the image is not PTX text (only PTX modules are served)",
            ));
        };
        // What the session reads of the PTX itself: the kernels' parameter layouts and
        // the device memory of the module's variables (counted against the quota before
        // the backend loads it). PTX that our parser does not read but the native driver
        // does gets no layouts and counts no variable memory.
        // One module parsed at a time per process: parsing takes many times the image's
        // size, for its duration.
        let inner = self.inner.clone();
        let _turn = inner.load_turn();
        let mut layouts = HashMap::new();
        let mut device_bytes = 0u64;
        if let Ok(m) = vmgpu_ptx::linked::parse_any("guest.ptx", text) {
            for f in m.functions.iter().filter(|f| f.is_entry) {
                layouts.insert(
                    f.name.clone(),
                    f.params
                        .iter()
                        .map(|p| ParamLayout {
                            offset: p.offset,
                            size: p.size,
                        })
                        .collect(),
                );
            }
            device_bytes = m
                .variables
                .iter()
                .filter(|v| matches!(v.space, Space::Global | Space::Const) && !v.is_extern)
                .fold(0u64, |n, v| n.saturating_add(v.size().max(1)));
        }
        self.memory_quota(device_bytes, "the module's .global/.const variables")?;
        let be = self.backend()?;
        let module = be.module_load_ptx(text)?;
        let host_bytes = be
            .module_host_bytes(&module)
            .unwrap_or(text.len() as u64)
            .saturating_add(layouts.capacity() as u64 * 64);
        if self.host_used.saturating_add(host_bytes) > self.quota.module_host_memory {
            // SAFETY: the module was loaded just now; nothing of it was handed out.
            let _ = unsafe { be.module_unload(module) };
            log::warn!(
                "guest {} (session {}): module host memory quota hit: {host_bytes} bytes, {} of {} in use",
                self.guest,
                self.id,
                self.host_used,
                self.quota.module_host_memory
            );
            return Err(failed(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: the module takes {host_bytes} bytes of the service's host memory, over its quota for modules ({} of {} bytes in use)",
                    self.guest, self.host_used, self.quota.module_host_memory
                ),
            ));
        }
        self.host_used += host_bytes;
        self.mem_used += device_bytes;
        self.inner
            .stats
            .device_bytes
            .fetch_add(device_bytes, Ordering::Relaxed);
        let h = self.modules.insert(
            cx,
            ModuleEntry {
                module,
                layouts,
                functions: HashMap::new(),
                device_bytes,
                host_bytes,
                variables: BTreeMap::new(),
            },
        );
        Ok(ReplyBody::Module(ModuleId(h)))
    }

    /// `ModuleUnload`: its functions go with it (the sync scope waited for the
    /// context's launches first).
    pub(super) fn module_unload(&mut self, cx: u64, module: ModuleId) -> Done {
        let entry = self
            .modules
            .remove(module.0, cx)
            .map_err(|m| super::miss("module", module.0, m))?;
        self.mem_used -= entry.device_bytes;
        self.host_used -= entry.host_bytes;
        self.inner
            .stats
            .device_bytes
            .fetch_sub(entry.device_bytes, Ordering::Relaxed);
        drop(self.functions.remove_where(|f| f.module == module.0));
        // SAFETY: the request synchronised the context first (its scope), so no launch
        // of the module is pending, and its functions were just removed from the
        // session's table, so none is launched afterwards.
        unsafe { self.backend()?.module_unload(entry.module)? };
        Ok(ReplyBody::Empty)
    }

    /// `ModuleGetFunction`: the same handle for the same kernel again (no new object).
    pub(super) fn module_get_function(&mut self, cx: u64, module: ModuleId, name: &str) -> Done {
        let m = Self::found(&self.modules, "module", module.0, cx)?;
        if let Some(&h) = m.functions.get(name) {
            if let Ok(f) = self.functions.get(h, cx) {
                return Ok(ReplyBody::Function(FunctionInfo {
                    function: FunctionId(h),
                    params: f.layout.clone(),
                }));
            }
        }
        self.object_quota("function")?;
        let be = self.backend()?;
        let function = be.module_get_function(&m.module, name)?;
        let layout = match be.function_params(&function) {
            Ok(Some(l)) => Some(
                l.into_iter()
                    .map(|p| ParamLayout {
                        offset: p.offset,
                        size: p.size,
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => m.layouts.get(name).cloned(),
        };
        let layout = layout.filter(|l| {
            l.len() <= self.limits.max_params as usize
                && l.last().is_none_or(|s| {
                    u64::from(s.offset) + u64::from(s.size)
                        <= u64::from(self.limits.max_param_bytes)
                })
        });
        let h = self.functions.insert(
            cx,
            FunctionEntry {
                function,
                module: module.0,
                layout: layout.clone(),
            },
        );
        if let Ok(m) = self.modules.get_mut(module.0, cx) {
            m.functions.insert(name.to_owned(), h);
        }
        Ok(ReplyBody::Function(FunctionInfo {
            function: FunctionId(h),
            params: layout,
        }))
    }

    /// `ModuleGetGlobal`: a variable's address and size; copies and memsets may reach
    /// it from now on (until the module goes).
    pub(super) fn module_get_global(&mut self, cx: u64, module: ModuleId, name: &str) -> Done {
        let m = Self::found(&self.modules, "module", module.0, cx)?;
        let (dptr, bytes) = self.backend()?.module_get_global(&m.module, name)?;
        if let Ok(m) = self.modules.get_mut(module.0, cx) {
            m.variables.insert(dptr.0, bytes as u64);
        }
        Ok(ReplyBody::Global {
            dptr,
            bytes: bytes as u64,
        })
    }

    /// `FuncSetAttribute`.
    pub(super) fn func_set_attribute(
        &mut self,
        cx: u64,
        function: FunctionId,
        attribute: i32,
        value: i32,
    ) -> Done {
        let f = Self::found(&self.functions, "function", function.0, cx)?;
        let a = FunctionAttribute::from_code(attribute)
            .ok_or_else(|| invalid(format!("function attribute {attribute}")))?;
        self.backend()?
            .function_set_attribute(&f.function, a, value)?;
        Ok(ReplyBody::Empty)
    }
}
