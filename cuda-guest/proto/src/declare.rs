//! The macros that turn the command table of `commands.rs` into code: `commands!`
//! (opcodes, requests, their codecs and rules) and `bodies!` (reply bodies). The
//! table is the only place a command's facts are written; this file only says how
//! each kind of fact becomes code.

/// The [`Field`](crate::codec::Field) of a field named `$f`: `$f`, `$f_len`, `$f_x`...
macro_rules! field {
    ($f:ident) => {
        $crate::codec::Field {
            name: stringify!($f),
            len: concat!(stringify!($f), "_len"),
            xyz: [
                concat!(stringify!($f), "_x"),
                concat!(stringify!($f), "_y"),
                concat!(stringify!($f), "_z"),
            ],
        }
    };
}

/// Appends field `$f` (a local holding a reference to its value) of a row:
/// `$f: Type`, `$f: Type as Codec`, either followed by `[earlier]`.
macro_rules! put_field {
    ($w:ident, $f:ident: $t:ty) => {
        <$t as $crate::codec::Wire>::put($f, field!($f), $w)?
    };
    ($w:ident, $f:ident: $t:ty as $c:ty) => {
        <$c as $crate::codec::Wire<$t>>::put($f, field!($f), $w)?
    };
    ($w:ident, $f:ident: $t:ty [$d:ident]) => {
        <$t as $crate::codec::WireAfter>::put($f, field!($f), $w)?
    };
    ($w:ident, $f:ident: $t:ty as $c:ty [$d:ident]) => {
        <$c as $crate::codec::WireAfter<$t>>::put($f, field!($f), $w)?
    };
}

/// Reads field `$f` of a row; `[earlier]` names the local `(offset, value)` of the
/// field it depends on.
macro_rules! take_field {
    ($r:ident, $l:ident, $f:ident: $t:ty) => {
        <$t as $crate::codec::Wire>::take(field!($f), $r, $l)?
    };
    ($r:ident, $l:ident, $f:ident: $t:ty as $c:ty) => {
        <$c as $crate::codec::Wire<$t>>::take(field!($f), $r, $l)?
    };
    ($r:ident, $l:ident, $f:ident: $t:ty [$d:ident]) => {
        <$t as $crate::codec::WireAfter>::take(&$d, field!($f), $r, $l)?
    };
    ($r:ident, $l:ident, $f:ident: $t:ty as $c:ty [$d:ident]) => {
        <$c as $crate::codec::WireAfter<$t>>::take(&$d, field!($f), $r, $l)?
    };
}

/// A sample value of a field of a row (tests); `[earlier]` names the local of the field
/// it depends on, which the sample may change to agree.
#[cfg(test)]
macro_rules! sample_field {
    ($g:ident, $t:ty) => {
        <$t as $crate::codec::Wire>::sample($g)
    };
    ($g:ident, $t:ty as $c:ty) => {
        <$c as $crate::codec::Wire<$t>>::sample($g)
    };
    ($g:ident, $t:ty [$d:ident]) => {
        <$t as $crate::codec::WireAfter>::sample(&mut $d, $g)
    };
    ($g:ident, $t:ty as $c:ty [$d:ident]) => {
        <$c as $crate::codec::WireAfter<$t>>::sample(&mut $d, $g)
    };
}

/// What a command needs before it is served, by its level: `session` (nothing),
/// `device` (`Init`), `context` (`Init` and a current context).
macro_rules! needs {
    (init session) => {
        false
    };
    (init device) => {
        true
    };
    (init context) => {
        true
    };
    (context session) => {
        false
    };
    (context device) => {
        false
    };
    (context context) => {
        true
    };
}

/// The flags a row may add after its level: `pipelined` (may go with `NO_REPLY`),
/// `v1_1`, `v1_2` (added in protocol 1.1, 1.2). `flag!(fact flag)` is what `flag` says
/// of `fact`.
macro_rules! flag {
    (pipelined pipelined) => {
        true
    };
    (pipelined v1_1) => {
        false
    };
    (pipelined v1_2) => {
        false
    };
    (minor pipelined) => {
        0
    };
    (minor v1_1) => {
        1
    };
    (minor v1_2) => {
        2
    };
}

/// `on field`: the stream a request is ordered on.
macro_rules! ordered_on {
    () => {
        None
    };
    ($f:ident) => {
        Some(*$f)
    };
}

/// `sync ...`: which deferred errors the reply reports.
macro_rules! sync_scope {
    () => {
        $crate::SyncScope::None
    };
    (context) => {
        $crate::SyncScope::Context
    };
    (stream($f:ident)) => {
        $crate::SyncScope::Stream(*$f)
    };
    (event($f:ident)) => {
        $crate::SyncScope::Event(*$f)
    };
}

/// `sync ...` as `docs/protocol.md`'s "sync scope" column writes it.
#[cfg(test)]
macro_rules! scope_column {
    () => {
        ""
    };
    (context) => {
        "context"
    };
    (stream) => {
        "stream"
    };
    (event) => {
        "event"
    };
}

/// The command table. Each row declares one command:
///
/// ```text
/// /// Doc of the request variant and its opcode.
/// Name {                                  // no braces: a command without payload
///     /// Field doc.
///     field: Type,                        // in wire order; Type: Wire
///     field: Type as Codec,               // Codec: Wire<Type> (e.g. Blob<MaxModule>)
///     field: Type [earlier],              // Type: WireAfter, reads with `earlier`
///     ;                                   // optional: the *Async twin, whose payload
///     /// Doc of the twin's opcode.       // is `stream: u64` then this one's; the
///     async stream => NameAsync = 0x.... [level, flags] sync ... -> Body => method;
/// } = 0x.... [level, flags]               // opcode; level: session | device | context;
///                                         // flags: pipelined (may go with NO_REPLY),
///                                         // v1_1 (added in protocol 1.1)
///   on field                              // optional: the stream it is ordered on
///   sync context | stream(field) | event(field)  // optional: what its reply reports
///   -> Body                               // the ReplyBody of a successful reply
///   => method | method;                   // the Backend method(s) serving it
///   => method(field: Arg, ...) -> Ret as "cuName";  // or: a plain command, one call
/// ```
///
/// From the rows come: [`Opcode`](crate::Opcode) with its rules, [`Request`](crate::Request)
/// with `opcode`, `stream`, `sync_scope`, the payload encoder and decoder, which
/// [`ReplyBody`](crate::ReplyBody) each reply has, and (in tests) a sample request of
/// every opcode. A plain row (the method's signature written out: its arguments are the
/// request's fields by name, each made into `Arg` by [`FromWire`](crate::serve::FromWire),
/// and `Ret` is what [`Body`](crate::serve::Body) puts in the reply) also gets its
/// server side, [`serve`](crate::serve()), and its client stub in `remote_stubs!`; no
/// handler is written for it anywhere.
macro_rules! commands {
    ($(
        $(#[$doc:meta])*
        $name:ident
        $({
            $(
                $(#[$fdoc:meta])*
                $field:ident : $fty:ty $(as $fcodec:ty)? $([$dep:ident])?
            ),+ $(,)?
            $(;
                $(#[$adoc:meta])*
                async $tstream:ident => $aname:ident = $acode:literal
                [$alevel:ident $(, $aflag:ident)*]
                $(sync $ascope:ident $(($asf:ident))?)?
                -> $abody:ident $(=> $($amethod:ident)|+)? $(;)?
            )?
        })?
        = $code:literal [$level:ident $(, $flag:ident)*]
        $(on $on:ident)?
        $(sync $scope:ident $(($sf:ident))?)?
        -> $body:ident
        $(=> $method:ident $(| $more:ident)*
            $(($($arg:ident : $aty:ty),*) -> $ret:ty as $cu:literal)?)?;
    )*) => {
        /// What a frame asks for: one CUDA driver call, or a session command. Replies repeat
        /// their request's opcode. Declared, with everything else about each command, in
        /// the command table (`commands.rs`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Opcode {
            $(
                $(#[$doc])*
                #[doc = concat!("\n\nOpcode `", stringify!($code), "`; a successful reply has [`ReplyBody::", stringify!($body), "`].")]
                $name = $code,
                $($(
                    $(#[$adoc])*
                    #[doc = concat!("\n\nOpcode `", stringify!($acode), "`; a successful reply has [`ReplyBody::", stringify!($abody), "`].")]
                    $aname = $acode,
                )?)?
            )*
        }

        impl Opcode {
            /// Every opcode, in the order of their numbers.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name, $($(Opcode::$aname,)?)?)*];

            /// The opcode with this number.
            pub fn from_u16(v: u16) -> Option<Opcode> {
                match v {
                    $(
                        $code => Some(Opcode::$name),
                        $($($acode => Some(Opcode::$aname),)?)?
                    )*
                    _ => None,
                }
            }

            /// Its name, as in `docs/protocol.md`.
            pub fn name(self) -> &'static str {
                match self {
                    $(
                        Opcode::$name => stringify!($name),
                        $($(Opcode::$aname => stringify!($aname),)?)?
                    )*
                }
            }

            /// Its number on the wire.
            pub const fn code(self) -> u16 {
                self as u16
            }

            /// Whether it may be sent with `NO_REPLY`: the stream-ordered commands whose
            /// reply would carry nothing but a status (launches, async memsets, async
            /// host-to-device and device-to-device copies, event records, stream waits).
            pub const fn pipelined(self) -> bool {
                match self {
                    $(
                        Opcode::$name => false $(|| flag!(pipelined $flag))*,
                        $($(Opcode::$aname => false $(|| flag!(pipelined $aflag))*,)?)?
                    )*
                }
            }

            /// The protocol minor version that added it: a peer of an older minor does
            /// not know it (the client refuses it with `CUDA_ERROR_NOT_SUPPORTED`).
            pub const fn minor(self) -> u16 {
                match self {
                    $(
                        Opcode::$name => 0 $(+ flag!(minor $flag))*,
                        $($(Opcode::$aname => 0 $(+ flag!(minor $aflag))*,)?)?
                    )*
                }
            }

            /// Whether it is served by one `Backend` call, its row naming the method's
            /// signature: [`serve`](crate::serve()) and the client's stub are generated.
            pub const fn plain(self) -> bool {
                match self {
                    $(
                        Opcode::$name => false $($(|| { let _ = $cu; true })?)?,
                        $($(Opcode::$aname => false,)?)?
                    )*
                }
            }

            /// Whether the command needs `Init` first (as every driver call but
            /// `cuDriverGetVersion` needs `cuInit`): everything but the session commands
            /// (`Ping`, `Init`, `DriverGetVersion`, `Goodbye`). Before `Init` the server
            /// answers `CUDA_ERROR_NOT_INITIALIZED`.
            pub const fn needs_init(self) -> bool {
                match self {
                    $(
                        Opcode::$name => needs!(init $level),
                        $($(Opcode::$aname => needs!(init $alevel),)?)?
                    )*
                }
            }

            /// Whether the command needs the session's current context: everything but the
            /// session, device-query and primary-context commands (and `cuCtxSetCurrent`).
            pub const fn needs_context(self) -> bool {
                match self {
                    $(
                        Opcode::$name => needs!(context $level),
                        $($(Opcode::$aname => needs!(context $alevel),)?)?
                    )*
                }
            }

            /// The `vmgpu_cuda_api::Backend` methods that serve it, named after the
            /// driver calls they wrap: one for most commands, one per element width for
            /// the memsets (`memset_d8`, `memset_d16`, `memset_d32`); none for the
            /// session commands and `DeviceGet`, which the session answers itself.
            pub const fn backend_methods(self) -> &'static [&'static str] {
                match self {
                    $(
                        Opcode::$name => &[$(stringify!($method) $(, stringify!($more))*)?],
                        $($(Opcode::$aname => &[$($(stringify!($amethod)),+)?],)?)?
                    )*
                }
            }

            /// The `vmgpu_cuda_api::Backend` method that serves it (the first of
            /// [`Opcode::backend_methods`]: for memsets the 8-bit one); `None` for the
            /// session commands and `DeviceGet`.
            pub const fn backend_method(self) -> Option<&'static str> {
                match self.backend_methods() {
                    [first, ..] => Some(first),
                    [] => None,
                }
            }

            /// The body of a successful reply.
            pub(crate) const fn reply_body(self) -> $crate::commands::BodyKind {
                match self {
                    $(
                        Opcode::$name => $crate::commands::BodyKind::$body,
                        $($(Opcode::$aname => $crate::commands::BodyKind::$abody,)?)?
                    )*
                }
            }

            /// Its sync scope as `docs/protocol.md`'s table writes it.
            #[cfg(test)]
            pub(crate) fn sync_column(self) -> &'static str {
                match self {
                    $(
                        Opcode::$name => scope_column!($($scope)?),
                        $($(Opcode::$aname => scope_column!($($ascope)?),)?)?
                    )*
                }
            }
        }

        // Every method a row names is a method of the backend trait.
        const _: () = {
            #[allow(dead_code)]
            fn backend_methods_exist() {
                $(
                    $(
                        let _ = <dyn vmgpu_cuda_api::Backend as vmgpu_cuda_api::Backend>::$method;
                        $(let _ = <dyn vmgpu_cuda_api::Backend as vmgpu_cuda_api::Backend>::$more;)*
                    )?
                    $($($($(
                        let _ = <dyn vmgpu_cuda_api::Backend as vmgpu_cuda_api::Backend>::$amethod;
                    )+)?)?)?
                )*
            }
        };

        /// One command of the guest. Field order and sizes on the wire are in
        /// `docs/protocol.md`; every `*Async` request's payload is `stream: u64` followed
        /// by the payload of its synchronous twin. A `None` stream selects the
        /// synchronous opcode.
        ///
        /// Not `#[non_exhaustive]`: a dispatcher should match every command, and a new one
        /// comes with a new protocol version.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Request {
            $(
                $(#[$doc])*
                $name $({
                    $(
                        $(#[$fdoc])*
                        $field: $fty,
                    )+
                    $(
                        /// `Some`: asynchronous on this stream.
                        $tstream: Option<$crate::StreamId>,
                    )?
                })?,
            )*
        }

        impl Request {
            /// Its opcode.
            pub fn opcode(&self) -> Opcode {
                match self {
                    $(
                        $($(Request::$name { $tstream: Some(_), .. } => Opcode::$aname,)?)?
                        Request::$name { .. } => Opcode::$name,
                    )*
                }
            }

            /// The stream a stream-ordered request is ordered on (`None` for the others;
            /// the synchronous copies and memsets are ordered on the legacy default stream
            /// but wait for the whole context, see [`Request::sync_scope`]).
            #[allow(unused_variables)]
            pub fn stream(&self) -> Option<$crate::StreamId> {
                match self {
                    $(
                        Request::$name $({ $($field,)+ $($tstream,)? })? => {
                            $($(if let Some($tstream) = $tstream { Some(*$tstream) } else)?)?
                            { ordered_on!($($on)?) }
                        }
                    )*
                }
            }

            /// Which deferred errors this request's reply reports. Synchronous copies and
            /// memsets, `MemFree`, `ModuleUnload`, `PrimaryCtxRelease` and `Goodbye` wait
            /// for the whole context, as the driver's implicit synchronisation does; an
            /// asynchronous device-to-host copy has a reply, sent when its stream has
            /// reached it, so it reports its stream's.
            #[allow(unused_variables)]
            pub fn sync_scope(&self) -> $crate::SyncScope {
                match self {
                    $(
                        Request::$name $({ $($field,)+ $($tstream,)? })? => {
                            $($(if let Some($tstream) = $tstream {
                                sync_scope!($($ascope $(($asf))?)?)
                            } else)?)?
                            { sync_scope!($($scope $(($sf))?)?) }
                        }
                    )*
                }
            }

            /// Appends the payload (everything after the frame header).
            pub(crate) fn encode_payload(
                &self,
                w: &mut $crate::wire::Writer<'_>,
            ) -> Result<(), $crate::EncodeError> {
                match self {
                    $(
                        Request::$name $({ $($field,)+ $($tstream,)? })? => {
                            $($(if let Some(s) = $tstream {
                                <$crate::StreamId as $crate::codec::Wire>::put(s, field!($tstream), w)?;
                            })?)?
                            $($(put_field!(w, $field: $fty $(as $fcodec)? $([$dep])?);)+)?
                        }
                    )*
                }
                Ok(())
            }

            /// Reads the payload of a request with `opcode` (the caller checks that
            /// nothing follows it).
            pub(crate) fn decode_payload(
                opcode: Opcode,
                r: &mut $crate::wire::Reader<'_>,
                limits: &$crate::Limits,
            ) -> Result<Request, $crate::FieldError> {
                Ok(match opcode {
                    $(
                        Opcode::$name $($(| Opcode::$aname)?)? => {
                            $($(
                                let $tstream = if opcode == Opcode::$aname {
                                    Some(<$crate::StreamId as $crate::codec::Wire>::take(
                                        field!($tstream),
                                        r,
                                        limits,
                                    )?)
                                } else {
                                    None
                                };
                            )?)?
                            $($(
                                let $field = (
                                    r.offset(),
                                    take_field!(r, limits, $field: $fty $(as $fcodec)? $([$dep])?),
                                );
                            )+)?
                            Request::$name $({ $($field: $field.1,)+ $($tstream,)? })?
                        }
                    )*
                })
            }

            /// A valid request of `opcode` with arbitrary field values.
            #[cfg(test)]
            #[allow(unused_mut)]
            pub(crate) fn sample(opcode: Opcode, g: &mut $crate::codec::Gen) -> Request {
                match opcode {
                    $(
                        Opcode::$name $($(| Opcode::$aname)?)? => {
                            $($(
                                let $tstream = if opcode == Opcode::$aname {
                                    Some(<$crate::StreamId as $crate::codec::Wire>::sample(g))
                                } else {
                                    None
                                };
                            )?)?
                            $($(
                                let mut $field = sample_field!(g, $fty $(as $fcodec)? $([$dep])?);
                            )+)?
                            Request::$name $({ $($field,)+ $($tstream,)? })?
                        }
                    )*
                }
            }
        }

        /// Serves `request` if its command is one `Backend` call ([`Opcode::plain`]):
        /// its fields made into the method's arguments by `server` ([`FromWire`](crate::serve::FromWire)),
        /// the method called on the backend that serves the command, its result made into
        /// the row's reply body. `None` for a command with code of its own.
        #[allow(unused_variables, clippy::needless_question_mark)]
        pub fn serve<S: $crate::serve::Serve>(
            server: &S,
            request: &Request,
        ) -> Option<Result<ReplyBody, S::Fail>> {
            match request {
                $($($(
                    Request::$name { $($arg,)* .. } => Some((|| {
                        $(let $arg: $aty = $crate::serve::FromWire::from_wire(server, $arg)?;)*
                        let value: $ret = server.backend(Opcode::$name)?.$method($($arg),*)?;
                        Ok(<$crate::commands::kinds::$body as $crate::serve::Body<$ret>>::wrap(value))
                    })()),
                )?)?)*
                _ => None,
            }
        }

        /// The client's stub of every command that is one `Backend` call: each
        /// `Backend` method of [`RemoteBackend`](crate::client::RemoteBackend) that a
        /// row names with its signature, sent as that row's request.
        macro_rules! remote_stubs {
            () => {$($($(
                fn $method(&self, $($arg: $aty),*) -> vmgpu_cuda_api::Result<$ret> {
                    self.plain(
                        $cu,
                        $crate::Opcode::$name,
                        &[$($crate::client::Arg::on(&$arg)),*],
                        $crate::Request::$name { $($arg: $crate::client::ToWire::to_wire(&$arg)),* },
                        <$crate::commands::kinds::$body as $crate::serve::Body<$ret>>::unwrap,
                    )
                }
            )?)?)*};
        }
        pub(crate) use remote_stubs;
    };
}

/// The [`Body`](crate::serve::Body) of one reply body: `()` for a body of nothing, its
/// value for a body of one, a tuple of its fields (in order) for a body of several.
macro_rules! body_value {
    ($name:ident) => {
        impl $crate::serve::Body<()> for kinds::$name {
            fn wrap((): ()) -> $crate::ReplyBody {
                $crate::ReplyBody::$name
            }
            fn unwrap(body: $crate::ReplyBody) -> Option<()> {
                match body {
                    $crate::ReplyBody::$name => Some(()),
                    _ => None,
                }
            }
        }
    };
    ($name:ident ($ty:ty)) => {
        impl $crate::serve::Body<$ty> for kinds::$name {
            fn wrap(value: $ty) -> $crate::ReplyBody {
                $crate::ReplyBody::$name(value)
            }
            fn unwrap(body: $crate::ReplyBody) -> Option<$ty> {
                match body {
                    $crate::ReplyBody::$name(value) => Some(value),
                    _ => None,
                }
            }
        }
    };
    ($name:ident { $($field:ident : $fty:ty),+ }) => {
        impl $crate::serve::Body<($($fty,)+)> for kinds::$name {
            fn wrap(($($field,)+): ($($fty,)+)) -> $crate::ReplyBody {
                $crate::ReplyBody::$name { $($field),+ }
            }
            fn unwrap(body: $crate::ReplyBody) -> Option<($($fty,)+)> {
                match body {
                    $crate::ReplyBody::$name { $($field),+ } => Some(($($field,)+)),
                    _ => None,
                }
            }
        }
    };
}

/// The reply bodies: one row per kind of successful reply, `Name;` (nothing),
/// `Name(Type) field;` or `Name(Type as Codec) field;` (one value, whose errors name
/// `field`), or `Name { field: Type, ... };`. Generates [`ReplyBody`](crate::ReplyBody)
/// (with `Detail`, the body of every failure), the kinds the command rows name after
/// `->`, and their codecs.
macro_rules! bodies {
    ($(
        $(#[$doc:meta])*
        $name:ident
        $(($ty:ty $(as $codec:ty)?) $tfield:ident)?
        $({
            $(
                $(#[$fdoc:meta])*
                $field:ident : $fty:ty $(as $fcodec:ty)?
            ),+ $(,)?
        })?;
    )*) => {
        /// The body of a reply.
        #[derive(Debug, Clone, PartialEq)]
        pub enum ReplyBody {
            $(
                $(#[$doc])*
                $name $(($ty))? $({
                    $(
                        $(#[$fdoc])*
                        $field: $fty,
                    )+
                })?,
            )*
            /// Failure detail (every reply whose status is not `SUCCESS`): `detail_len: u32`,
            /// UTF-8.
            Detail(String),
        }

        /// One marker type per reply body, for [`Body`](crate::serve::Body): what
        /// value each carries.
        // A marker is used once a row served by one backend call has its body.
        #[allow(dead_code)]
        pub(crate) mod kinds {
            $(
                #[doc = concat!("[`ReplyBody::", stringify!($name), "`](crate::ReplyBody).")]
                #[derive(Debug)]
                pub(crate) enum $name {}
            )*
        }
        $(body_value!($name $(($ty))? $({ $($field: $fty),+ })?);)*

        /// Which body a successful reply has (one per [`ReplyBody`] variant but `Detail`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum BodyKind {
            $($name,)*
        }

        impl ReplyBody {
            /// Its kind; `None` for a failure's detail.
            pub(crate) fn kind(&self) -> Option<BodyKind> {
                match self {
                    $(ReplyBody::$name { .. } => Some(BodyKind::$name),)*
                    ReplyBody::Detail(_) => None,
                }
            }

            /// The variant's name (for errors).
            pub(crate) fn name(&self) -> &'static str {
                match self {
                    $(ReplyBody::$name { .. } => stringify!($name),)*
                    ReplyBody::Detail(_) => "Detail",
                }
            }

            /// Appends the body.
            pub(crate) fn encode(
                &self,
                w: &mut $crate::wire::Writer<'_>,
            ) -> Result<(), $crate::EncodeError> {
                match self {
                    $(
                        ReplyBody::$name $(($tfield))? $({ $($field),+ })? => {
                            $(put_field!(w, $tfield: $ty $(as $codec)?);)?
                            $($(put_field!(w, $field: $fty $(as $fcodec)?);)+)?
                        }
                    )*
                    ReplyBody::Detail(d) => w.blob("detail", d.as_bytes())?,
                }
                Ok(())
            }

            /// Reads a successful reply's body of `kind`.
            pub(crate) fn decode(
                kind: BodyKind,
                r: &mut $crate::wire::Reader<'_>,
                limits: &$crate::Limits,
            ) -> Result<ReplyBody, $crate::FieldError> {
                Ok(match kind {
                    $(
                        BodyKind::$name => ReplyBody::$name
                            $((take_field!(r, limits, $tfield: $ty $(as $codec)?)))?
                            $({ $($field: take_field!(r, limits, $field: $fty $(as $fcodec)?),)+ })?,
                    )*
                })
            }

            /// A body of `kind` with arbitrary values.
            #[cfg(test)]
            pub(crate) fn sample(kind: BodyKind, g: &mut $crate::codec::Gen) -> ReplyBody {
                match kind {
                    $(
                        BodyKind::$name => ReplyBody::$name
                            $((sample_field!(g, $ty $(as $codec)?)))?
                            $({ $($field: sample_field!(g, $fty $(as $fcodec)?),)+ })?,
                    )*
                }
            }
        }
    };
}
