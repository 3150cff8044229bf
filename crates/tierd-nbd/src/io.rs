//! Socket plumbing shared by the server and the client: one stream type over
//! Unix and TCP sockets, and a read buffer that can tell whether a whole
//! request is already buffered.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;

use crate::proto::{NBD_CMD_WRITE, REQUEST_HEADER_BYTES};
use crate::tls::SharedTls;

/// A connected stream socket.
#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
    /// A server-side TLS session run on the caller's thread (one thread
    /// both reads and writes it, so it cannot be cloned): the handshake.
    ServerTls(Box<rustls::StreamOwned<rustls::ServerConnection, Stream>>),
    /// A server-side TLS session several threads read and write (one reads
    /// requests while others write replies): transmission.
    SharedTls(Arc<SharedTls>),
}

impl Stream {
    /// A second handle on the same socket. A TLS session has one owner:
    /// cloning it is `Unsupported`.
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(stream) => Stream::Unix(stream.try_clone()?),
            Stream::Tcp(stream) => Stream::Tcp(stream.try_clone()?),
            Stream::ServerTls(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "an in-thread TLS session cannot be shared between threads (share_tls first)",
                ))
            }
            Stream::SharedTls(tls) => Stream::SharedTls(Arc::clone(tls)),
        })
    }

    /// An in-thread server TLS session becomes one its threads can share
    /// (the socket turns non-blocking); any other stream is returned as it
    /// is.
    pub fn share_tls(self) -> io::Result<Stream> {
        match self {
            Stream::ServerTls(owned) => Ok(Stream::SharedTls(Arc::new(SharedTls::new(*owned)?))),
            other => Ok(other),
        }
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Unix(stream) => stream.shutdown(how),
            Stream::Tcp(stream) => stream.shutdown(how),
            Stream::ServerTls(tls) => tls.sock.shutdown(how),
            Stream::SharedTls(tls) => tls.socket().shutdown(how),
        }
    }

    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        match self {
            Stream::Unix(stream) => stream.set_nonblocking(nonblocking),
            Stream::Tcp(stream) => stream.set_nonblocking(nonblocking),
            Stream::ServerTls(tls) => tls.sock.set_nonblocking(nonblocking),
            // Always non-blocking underneath; reads and writes wait in
            // poll(2) themselves.
            Stream::SharedTls(_) => Ok(()),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(stream) => stream.as_raw_fd(),
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::ServerTls(tls) => tls.sock.as_raw_fd(),
            Stream::SharedTls(tls) => tls.socket().as_raw_fd(),
        }
    }
}

impl Read for Stream {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(stream) => stream.read(buf),
            Stream::Tcp(stream) => stream.read(buf),
            // NBD frames every message, so a peer that closes without
            // close_notify is just a closed stream here; a cut message is
            // still caught by whoever was reading it.
            Stream::ServerTls(tls) => match tls.read(buf) {
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
            Stream::SharedTls(tls) => tls.read(buf),
        }
    }
}

/// `sendmsg(2)` of `bufs` with `MSG_NOSIGNAL`: a peer that hung up is an
/// `EPIPE` error, never a SIGPIPE that kills the process. std's socket
/// `write` already passes `MSG_NOSIGNAL`, but its `write_vectored` is a
/// plain `writev`, which raises SIGPIPE; rustls writes its records with
/// `write_vectored`, and `tierd` restores SIGPIPE's default action for its
/// pipe-friendly commands (a TLS `tierd replay` died of it).
pub(crate) fn send_vectored_no_signal(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec on Unix (std documents it); the
    // kernel only reads through the pointer.
    message.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    message.msg_iovlen = bufs.len().min(1024) as _;
    // SAFETY: `message` points at `bufs`, valid for the whole call.
    let sent = unsafe { libc::sendmsg(fd, &message, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(sent as usize)
    }
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(stream) => stream.write(buf),
            Stream::Tcp(stream) => stream.write(buf),
            Stream::ServerTls(tls) => tls.write(buf),
            Stream::SharedTls(tls) => tls.write_all(buf).map(|()| buf.len()),
        }
    }

    #[inline]
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Unix(stream) => send_vectored_no_signal(stream.as_raw_fd(), bufs),
            Stream::Tcp(stream) => send_vectored_no_signal(stream.as_raw_fd(), bufs),
            Stream::ServerTls(tls) => tls.write_vectored(bufs),
            Stream::SharedTls(tls) => tls.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::ServerTls(tls) => tls.flush(),
            _ => Ok(()),
        }
    }
}

/// Makes way for a Unix socket at `path`: nothing there is fine; a socket
/// nobody accepts on (left by a process that died) is removed; a socket a
/// live server listens on, or any other kind of file, is an error.
pub fn remove_stale_socket(path: &Path) -> io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if !metadata.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the path exists and is not a socket; refusing to replace it",
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another server is listening on this socket",
        )),
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path)
        }
        Err(error) => Err(error),
    }
}

/// socket + bind + chmod 0600 + listen (`backlog`): nobody can connect
/// before the mode is set, because connecting needs `listen`. Used for the
/// NBD sockets and `tierd serve`'s admin socket.
pub fn bind_unix_private(path: &Path, backlog: i32) -> io::Result<UnixListener> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= address.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a socket path must be 1 to {} bytes without NUL (this one is {}); use a shorter data_dir or socket path",
                address.sun_path.len() - 1,
                bytes.len()
            ),
        ));
    }
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (slot, byte) in address.sun_path.iter_mut().zip(bytes) {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: plain system calls on a descriptor this function owns.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let owned = OwnedFd::from_raw_fd(fd);
        let length = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as u32;
        if libc::bind(
            fd,
            &address as *const libc::sockaddr_un as *const libc::sockaddr,
            length,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        let mut c_path = bytes.to_vec();
        c_path.push(0);
        if libc::chmod(c_path.as_ptr() as *const libc::c_char, 0o600) != 0
            || libc::listen(fd, backlog) != 0
        {
            let error = io::Error::last_os_error();
            let _ = std::fs::remove_file(path);
            return Err(error);
        }
        Ok(UnixListener::from(owned))
    }
}

/// A fixed-capacity read buffer in front of a socket. Reads fetch as much as
/// the kernel has (up to the free space), so pipelined requests arrive in one
/// system call and can be answered with one write.
pub struct InputBuffer {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

/// The outcome of waiting for bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Fill {
    /// At least the asked-for bytes are buffered.
    Ready,
    /// The peer closed the stream with nothing buffered: a clean end at a
    /// message boundary.
    Closed,
}

impl InputBuffer {
    pub fn with_capacity(capacity_bytes: usize) -> Self {
        Self {
            data: vec![0; capacity_bytes.max(REQUEST_HEADER_BYTES * 2)],
            start: 0,
            end: 0,
        }
    }

    /// The bytes buffered and not yet consumed.
    #[inline]
    pub fn buffered(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    #[inline]
    pub fn consume(&mut self, count_bytes: usize) {
        debug_assert!(count_bytes <= self.end - self.start);
        self.start += count_bytes.min(self.end - self.start);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Waits until `count_bytes` (at most the capacity) are buffered.
    /// End of stream with nothing buffered is [`Fill::Closed`]; in the middle
    /// of a message it is an `UnexpectedEof` error.
    pub fn fill(&mut self, stream: &mut impl Read, count_bytes: usize) -> io::Result<Fill> {
        debug_assert!(count_bytes <= self.data.len());
        let count_bytes = count_bytes.min(self.data.len());
        while self.end - self.start < count_bytes {
            if self.data.len() - self.start < count_bytes {
                self.data.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let read = match stream.read(&mut self.data[self.end..]) {
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if read == 0 {
                if self.start == self.end {
                    return Ok(Fill::Closed);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "peer closed the connection with {} of {} bytes of a message received",
                        self.end - self.start,
                        count_bytes
                    ),
                ));
            }
            self.end += read;
        }
        Ok(Fill::Ready)
    }

    /// Fills `destination` from buffered bytes first, then straight from the
    /// stream (large payloads skip the buffer).
    pub fn read_exact(&mut self, stream: &mut impl Read, destination: &mut [u8]) -> io::Result<()> {
        let buffered = (self.end - self.start).min(destination.len());
        destination[..buffered].copy_from_slice(&self.data[self.start..self.start + buffered]);
        self.consume(buffered);
        let rest = &mut destination[buffered..];
        if rest.is_empty() {
            return Ok(());
        }
        if rest.len() < self.data.len() / 2 {
            // Small remainder: refill the buffer so following requests come
            // along in the same system call.
            self.fill(stream, rest.len()).and_then(|fill| match fill {
                Fill::Ready => Ok(()),
                Fill::Closed => Err(io::ErrorKind::UnexpectedEof.into()),
            })?;
            let count = rest.len();
            rest.copy_from_slice(&self.data[self.start..self.start + count]);
            self.consume(count);
            return Ok(());
        }
        stream.read_exact(rest)
    }

    /// Reads and drops `count_bytes`.
    pub fn discard(&mut self, stream: &mut impl Read, count_bytes: u64) -> io::Result<()> {
        let mut left = count_bytes;
        while left > 0 {
            if self.start == self.end && self.fill(stream, 1)? == Fill::Closed {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = (left.min((self.end - self.start) as u64)) as usize;
            self.consume(take);
            left -= take as u64;
        }
        Ok(())
    }

    /// True when a whole request (header, and payload for a write) is
    /// buffered, so answering it needs no further read. A header with bad
    /// magic counts as whole: it will end the connection without a read.
    #[inline]
    pub fn has_complete_request(&self) -> bool {
        let buffered = self.buffered();
        if buffered.len() < REQUEST_HEADER_BYTES {
            return false;
        }
        let command = u16::from_be_bytes([buffered[6], buffered[7]]);
        if command != NBD_CMD_WRITE {
            return true;
        }
        let length =
            u32::from_be_bytes([buffered[24], buffered[25], buffered[26], buffered[27]]) as usize;
        buffered.len() >= REQUEST_HEADER_BYTES.saturating_add(length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{RequestHeader, NBD_CMD_READ};

    /// Hands out its bytes a few at a time.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let count = self.step.min(buf.len()).min(self.bytes.len());
            buf[..count].copy_from_slice(&self.bytes[..count]);
            self.bytes = &self.bytes[count..];
            Ok(count)
        }
    }

    fn header(command: u16, length_bytes: u32) -> [u8; REQUEST_HEADER_BYTES] {
        RequestHeader {
            flags: 0,
            command,
            cookie: 1,
            offset_bytes: 0,
            length_bytes,
        }
        .encode()
    }

    /// A write to a socket whose peer is gone is an EPIPE error even when
    /// SIGPIPE has its default action (as in `tierd replay`, which a
    /// relay's late close_notify used to kill). Runs in a forked child so
    /// the signal disposition of the test process is untouched.
    #[test]
    fn writes_to_a_closed_peer_fail_with_epipe_not_sigpipe() {
        use std::os::fd::FromRawFd;
        // SAFETY: the child only makes system calls (no allocation, no
        // locks) and leaves with _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                let mut fds = [0; 2];
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) != 0 {
                    libc::_exit(2);
                }
                libc::close(fds[1]);
                let mut stream = Stream::Unix(UnixStream::from_raw_fd(fds[0]));
                let single = stream.write(b"x");
                let vectored = stream.write_vectored(&[io::IoSlice::new(b"y")]);
                let epipe = |result: &io::Result<usize>| matches!(result, Err(error) if error.raw_os_error() == Some(libc::EPIPE));
                libc::_exit(if epipe(&single) && epipe(&vectored) {
                    0
                } else {
                    1
                });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child died of signal {} or exited {}",
            libc::WTERMSIG(status),
            libc::WEXITSTATUS(status)
        );
    }

    #[test]
    fn complete_request_needs_the_whole_write_payload() {
        let mut bytes = header(NBD_CMD_WRITE, 8).to_vec();
        bytes.extend_from_slice(&[7; 8]);
        let mut input = InputBuffer::with_capacity(256);
        let mut source = Trickle {
            bytes: &bytes,
            step: 30,
        };
        assert_eq!(input.fill(&mut source, 28).unwrap(), Fill::Ready);
        assert!(!input.has_complete_request());
        assert_eq!(input.fill(&mut source, 36).unwrap(), Fill::Ready);
        assert!(input.has_complete_request());
        input.consume(28);
        let mut payload = [0u8; 8];
        input.read_exact(&mut source, &mut payload).unwrap();
        assert_eq!(payload, [7; 8]);
        assert_eq!(input.fill(&mut source, 28).unwrap(), Fill::Closed);
    }

    #[test]
    fn eof_inside_a_message_is_an_error_and_discard_skips_bytes() {
        let mut bytes = vec![0u8; 100];
        bytes.extend_from_slice(&header(NBD_CMD_READ, 4));
        let mut input = InputBuffer::with_capacity(64);
        let mut source = Trickle {
            bytes: &bytes,
            step: 7,
        };
        input.discard(&mut source, 100).unwrap();
        assert_eq!(input.fill(&mut source, 28).unwrap(), Fill::Ready);
        assert!(input.has_complete_request());
        input.consume(20);
        assert!(input.fill(&mut source, 28).is_err());
    }
}
