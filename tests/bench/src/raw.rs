//! The raw column's driver functions, resolved once before timing so that the loops pay only the
//! indirect call: the floor a C program calling libcuda pays.

use cuda_stream_sys as sys;

/// The raw driver functions the rows call.
#[derive(Clone, Copy)]
pub(crate) struct Raw {
    pub(crate) stream_create: sys::pfn::cuStreamCreate,
    pub(crate) stream_destroy: sys::pfn::cuStreamDestroy,
    pub(crate) stream_query: sys::pfn::cuStreamQuery,
    pub(crate) stream_synchronize: sys::pfn::cuStreamSynchronize,
    pub(crate) stream_wait_event: sys::pfn::cuStreamWaitEvent,
    pub(crate) event_create: sys::pfn::cuEventCreate,
    pub(crate) event_destroy: sys::pfn::cuEventDestroy,
    pub(crate) event_record: sys::pfn::cuEventRecord,
    pub(crate) launch_host_func: sys::pfn::cuLaunchHostFunc,
    pub(crate) ctx_get_current: sys::pfn::cuCtxGetCurrent,
}

impl Raw {
    pub(crate) fn load() -> Result<Raw, sys::LoadError> {
        Ok(Raw {
            stream_create: sys::fns::cuStreamCreate()?,
            stream_destroy: sys::fns::cuStreamDestroy()?,
            stream_query: sys::fns::cuStreamQuery()?,
            stream_synchronize: sys::fns::cuStreamSynchronize()?,
            stream_wait_event: sys::fns::cuStreamWaitEvent()?,
            event_create: sys::fns::cuEventCreate()?,
            event_destroy: sys::fns::cuEventDestroy()?,
            event_record: sys::fns::cuEventRecord()?,
            launch_host_func: sys::fns::cuLaunchHostFunc()?,
            ctx_get_current: sys::fns::cuCtxGetCurrent()?,
        })
    }
}
