//! The commands that are one `Backend` call: a row of the command table that names the
//! method's signature (`=> method(arg: Type, ...) -> Ret as "cuName"`) is served by
//! [`serve`](crate::serve()) on the service's side and by a generated stub in the client
//! ([`RemoteBackend`](crate::client::RemoteBackend)); neither side writes code for it.
//! The row's arguments are its request fields, by name; [`FromWire`] turns a field into
//! the method's argument (a handle the server looks up, an attribute number into its
//! enum), [`Body`] the method's result into the reply body the row names and back.
//!
//! A server implements [`Serve`] (which backend serves a command, and its failure type)
//! and [`FromWire`] for its handles; the value conversions are here.

use std::sync::Arc;

use vmgpu_cuda_api::{
    Backend, Device, DeviceAttribute, DriverError, Event, Function, FunctionAttribute, Module,
    Stream,
};

use crate::{EventId, FunctionId, ModuleId, Opcode, StreamId};

/// The side that serves requests (a session of the service): which backend serves a
/// command, and the objects its handles name.
pub trait Serve {
    /// How a request fails there (a driver error becomes one).
    type Fail: From<DriverError>;

    /// The backend that serves `opcode` (the device's for session and device commands,
    /// the current context's for the others).
    fn backend(&self, opcode: Opcode) -> Result<Arc<dyn Backend>, Self::Fail>;
    /// The device of ordinal `ordinal`.
    fn device(&self, ordinal: u32) -> Result<Device, Self::Fail>;
    /// The module `id` names (in the current context).
    fn module(&self, id: ModuleId) -> Result<&Module, Self::Fail>;
    /// The kernel `id` names (in the current context).
    fn function(&self, id: FunctionId) -> Result<&Function, Self::Fail>;
    /// The stream `id` names (in the current context; the default stream for 0, 1, 2).
    fn stream(&self, id: StreamId) -> Result<&Stream, Self::Fail>;
    /// The event `id` names (in the current context).
    fn event(&self, id: EventId) -> Result<&Event, Self::Fail>;
}

/// A device by ordinal, and objects by handle, as the server finds them.
macro_rules! found_by_the_server {
    ($($id:ty => $t:ty: $lookup:ident;)*) => {$(
        impl<'a, S: Serve + ?Sized> FromWire<'a, $id, S> for $t {
            fn from_wire(server: &'a S, wire: &'a $id) -> Result<Self, S::Fail> {
                server.$lookup(*wire)
            }
        }
    )*};
}
found_by_the_server! {
    u32 => Device: device;
    ModuleId => &'a Module: module;
    FunctionId => &'a Function: function;
    StreamId => &'a Stream: stream;
    EventId => &'a Event: event;
}

/// An argument of a `Backend` method made from a request field of type `W` by server
/// `S`: a handle `S` looks up (and checks), or a value converted.
pub trait FromWire<'a, W: ?Sized, S: Serve + ?Sized>: Sized {
    /// The argument, or why the field names none.
    fn from_wire(server: &'a S, wire: &'a W) -> Result<Self, S::Fail>;
}

/// Plain values pass as they are.
macro_rules! same_on_the_wire {
    ($($t:ty),*) => {$(
        impl<'a, S: Serve + ?Sized> FromWire<'a, $t, S> for $t {
            fn from_wire(_: &'a S, wire: &'a $t) -> Result<Self, S::Fail> {
                Ok(*wire)
            }
        }
    )*};
}
same_on_the_wire!(i32, u64);

impl<'a, S: Serve + ?Sized> FromWire<'a, String, S> for &'a str {
    fn from_wire(_: &'a S, wire: &'a String) -> Result<Self, S::Fail> {
        Ok(wire)
    }
}

/// Any attribute by number (the backend answers the ones it does not know).
impl<'a, S: Serve + ?Sized> FromWire<'a, i32, S> for DeviceAttribute {
    fn from_wire(_: &'a S, wire: &'a i32) -> Result<Self, S::Fail> {
        Ok(DeviceAttribute::Raw(*wire))
    }
}

/// A `CU_FUNC_ATTRIBUTE_*` number; another is `CUDA_ERROR_INVALID_VALUE`.
impl<'a, S: Serve + ?Sized> FromWire<'a, i32, S> for FunctionAttribute {
    fn from_wire(_: &'a S, wire: &'a i32) -> Result<Self, S::Fail> {
        FunctionAttribute::from_code(*wire).ok_or_else(|| {
            DriverError::InvalidArgument {
                operation: "function attribute",
                reason: format!("{wire} is not a CU_FUNC_ATTRIBUTE_* number"),
            }
            .into()
        })
    }
}

/// A reply body (`Self`, a marker type of the command table, one per `ReplyBody` kind) that
/// carries a `T`.
pub trait Body<T> {
    /// The body carrying `value`.
    fn wrap(value: T) -> crate::ReplyBody;
    /// The value of a body of this kind; `None` for another kind.
    fn unwrap(body: crate::ReplyBody) -> Option<T>;
}
