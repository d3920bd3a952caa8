//! Descriptors over a Unix socket (`SCM_RIGHTS`): the one place the crate passes them (issue
//! 41 point 4). The spawner's requests carry a command's standard streams, step pipe and proxy
//! socket; a namespace's init hands the proxy's listener back to the agent.
//!
//! Both functions are async-signal-safe — system calls on stack memory, no allocation — so
//! they may run between `fork` and `exec`, where the spawner and init call them.

use std::os::fd::RawFd;

/// Most descriptors one message carries.
pub(crate) const MAX_FDS: usize = 4;

/// Control-message room for [`MAX_FDS`] descriptors, 8-byte aligned.
type Control = [u64; 8];

/// What one received message held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Received {
    /// A message of `len` bytes with `fds` descriptors, now in the caller's buffers (the
    /// descriptors close-on-exec).
    Message { len: usize, fds: usize },
    /// A message whose descriptors did not all fit: those that did are closed.
    Truncated,
    /// The peer closed its end.
    Closed,
}

/// Send `data` (not empty: an empty message reads as a closed peer) with `fds` (at most
/// [`MAX_FDS`]) as one message; `Err(errno)` when that failed (`EMSGSIZE`: too large for
/// the socket).
///
/// # Safety
/// `fds` must be open descriptors of this process.
pub(crate) unsafe fn send(sock: RawFd, data: &[u8], fds: &[RawFd]) -> Result<(), i32> {
    if data.is_empty() || fds.len() > MAX_FDS {
        return Err(libc::EINVAL);
    }
    let len = std::mem::size_of_val(fds);
    let mut control: Control = [0; 8];
    // SAFETY: (whole body) the control buffer is aligned and has room for MAX_FDS
    // descriptors; every pointer is to memory that outlives the call, and `sendmsg` only
    // reads through the data pointer.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: data.len(),
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if fds.is_empty() {
            let sent = libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
            return if sent == data.len() as isize {
                Ok(())
            } else {
                Err(errno())
            };
        }
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(len as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(libc::EINVAL);
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(len as u32) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) != data.len() as isize {
            return Err(errno());
        }
    }
    Ok(())
}

/// Receive one message into `buf` and `out`, its descriptors close-on-exec; `flags` are
/// `recvmsg`'s (e.g. `MSG_DONTWAIT`). `Err(errno)` when the read failed (`EINTR` included).
/// A message longer than `buf` is [`Received::Truncated`] on a datagram socket.
///
/// # Safety
/// The descriptors received belong to the caller from then on.
pub(crate) unsafe fn recv(
    sock: RawFd,
    flags: libc::c_int,
    buf: &mut [u8],
    out: &mut [RawFd; MAX_FDS],
) -> Result<Received, i32> {
    let mut control: Control = [0; 8];
    // SAFETY: (whole body) as in `send`; what the kernel wrote is read within its bounds.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of::<Control>() as _;
        let n = libc::recvmsg(sock, &mut msg, flags | libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(errno());
        }
        if n == 0 {
            return Ok(Received::Closed);
        }
        let mut count = 0;
        let mut overflow = false;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let k = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..k {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    if count < MAX_FDS {
                        out[count] = fd;
                        count += 1;
                    } else {
                        overflow = true;
                        libc::close(fd);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if overflow || msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
            for &fd in &out[..count] {
                libc::close(fd);
            }
            return Ok(Received::Truncated);
        }
        Ok(Received::Message {
            len: n as usize,
            fds: count,
        })
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn descriptors_arrive_usable_and_close_on_exec() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut r, w) = std::io::pipe().unwrap();
        // SAFETY: `w` is an open descriptor of this process.
        unsafe { send(a.as_raw_fd(), b"req", &[w.as_raw_fd()]) }.unwrap();
        drop(w);
        let mut out = [-1; MAX_FDS];
        let mut buf = [0u8; 16];
        // SAFETY: the received descriptor is taken into a File below.
        let got = unsafe { recv(b.as_raw_fd(), 0, &mut buf, &mut out) }.unwrap();
        assert_eq!(got, Received::Message { len: 3, fds: 1 });
        assert_eq!(&buf[..3], b"req");
        // SAFETY: fcntl on a descriptor we now own.
        let flags = unsafe { libc::fcntl(out[0], libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        // SAFETY: `out[0]` is ours, taken once.
        let mut f = unsafe { std::fs::File::from_raw_fd(out[0]) };
        f.write_all(b"through").unwrap();
        drop(f);
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        assert_eq!(s, "through");
        // More than MAX_FDS is refused before anything is sent; a closed peer is seen.
        let five = [0; 5];
        assert_eq!(
            // SAFETY: nothing is sent.
            unsafe { send(a.as_raw_fd(), b"x", &five) },
            Err(libc::EINVAL)
        );
        drop(a);
        // SAFETY: nothing is received.
        let got = unsafe { recv(b.as_raw_fd(), libc::MSG_DONTWAIT, &mut buf, &mut out) };
        assert_eq!(got, Ok(Received::Closed));
    }
}
