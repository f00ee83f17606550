package kvevents

/*
#cgo pkg-config: libzmq
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

// KV_FRAMES is the number of frames kept per message; the rest are read and
// dropped.
#define KV_FRAMES 4

// kv_recv receives up to max whole messages from sock without blocking,
// into msgs (max * KV_FRAMES of them). For message i it writes its frame
// count to frames[i] (the true count, even above KV_FRAMES) and the sizes
// of the frames kept to sizes[i*KV_FRAMES ...]. It returns the messages
// received and sets *err to the errno that stopped it, 0 when max were read.
static int kv_recv(uintptr_t sock, zmq_msg_t *msgs, int max, int32_t *frames,
                   int64_t *sizes, int *err) {
	void *s = (void *)sock;
	zmq_msg_t extra;
	int n = 0;
	*err = 0;
	while (n < max) {
		int f = 0, more = 1;
		while (more) {
			zmq_msg_t *m = f < KV_FRAMES ? &msgs[n * KV_FRAMES + f] : &extra;
			zmq_msg_init(m);
			if (zmq_msg_recv(m, s, ZMQ_DONTWAIT) < 0) {
				*err = zmq_errno();
				zmq_msg_close(m);
				for (int j = 0; j < f && j < KV_FRAMES; j++) {
					zmq_msg_close(&msgs[n * KV_FRAMES + j]);
				}
				return n;
			}
			more = zmq_msg_more(m);
			if (f < KV_FRAMES) {
				sizes[n * KV_FRAMES + f] = (int64_t)zmq_msg_size(m);
			} else {
				zmq_msg_close(m);
			}
			f++;
		}
		frames[n] = f;
		n++;
	}
	return n;
}

// kv_copy copies the kept frames of the n messages kv_recv received into
// dst, back to back in order, and releases them.
static void kv_copy(zmq_msg_t *msgs, int n, const int32_t *frames, char *dst) {
	for (int i = 0; i < n; i++) {
		int f = frames[i] < KV_FRAMES ? frames[i] : KV_FRAMES;
		for (int j = 0; j < f; j++) {
			zmq_msg_t *m = &msgs[i * KV_FRAMES + j];
			size_t sz = zmq_msg_size(m);
			if (sz > 0) {
				memcpy(dst, zmq_msg_data(m), sz);
				dst += sz;
			}
			zmq_msg_close(m);
		}
	}
}

static zmq_msg_t *kv_alloc(int max) {
	return (zmq_msg_t *)calloc((size_t)max * KV_FRAMES, sizeof(zmq_msg_t));
}
*/
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	zmq "github.com/pebbe/zmq4"
)

// recvFrames is C's KV_FRAMES.
const recvFrames = C.KV_FRAMES

// recvBatch bounds the messages one reader call takes off the socket.
const recvBatch = 256

// reader takes runs of multipart messages off a socket in two calls into
// libzmq per run, where zmq4's RecvMessageBytes makes six per frame: at a
// pod's event rates those calls, not decoding or indexing, dominated the
// subscriber's CPU. The frames of a run are copied into one new buffer the
// batches keep (queued batches are never overwritten).
type reader struct {
	sock   *zmq.Socket
	raw    C.uintptr_t
	msgs   *C.zmq_msg_t
	frames []int32
	sizes  []int64
	views  [recvFrames][]byte
}

// newReader returns a reader of sock; close releases it (before sock is
// closed). Without the socket's libzmq handle, which zmq4 shows only in a
// socket's String, it falls back to RecvMessageBytes.
func newReader(sock *zmq.Socket) *reader {
	r := &reader{sock: sock}
	if h, ok := socketHandle(sock); ok {
		r.raw, r.msgs = C.uintptr_t(h), C.kv_alloc(recvBatch)
	}
	if r.msgs != nil {
		r.frames = make([]int32, recvBatch)
		r.sizes = make([]int64, recvBatch*recvFrames)
	}
	return r
}

// fast reports whether r reads through its own calls into libzmq.
func (r *reader) fast() bool { return r.msgs != nil }

// socketHandle returns the libzmq handle of sock, read from its String:
// "Socket(TYPE,0xADDR)".
func socketHandle(sock *zmq.Socket) (uintptr, bool) { return parseSocketHandle(sock.String()) }

func parseSocketHandle(s string) (uintptr, bool) {
	i := strings.LastIndex(s, ",0x")
	if i < 0 || !strings.HasSuffix(s, ")") {
		return 0, false
	}
	h, err := strconv.ParseUint(s[i+3:len(s)-1], 16, 64)
	if err != nil || h == 0 {
		return 0, false
	}
	return uintptr(h), true
}

func (r *reader) close() {
	if r.msgs != nil {
		C.free(unsafe.Pointer(r.msgs))
		r.msgs = nil
	}
}

// drain hands every message waiting on the socket to fn, at most limit, and
// returns how many it read. fn may keep the frames' bytes but not the
// slice of frames. An error other than "nothing waiting" is returned.
func (r *reader) drain(limit int, fn func(frames [][]byte)) (int, error) {
	if !r.fast() {
		return r.drainSlow(limit, fn)
	}
	total := 0
	for total < limit {
		var cerr C.int
		want := min(recvBatch, limit-total)
		n := int(C.kv_recv(r.raw, r.msgs, C.int(want), (*C.int32_t)(unsafe.Pointer(&r.frames[0])),
			(*C.int64_t)(unsafe.Pointer(&r.sizes[0])), &cerr))
		if n > 0 {
			r.deliver(n, fn)
			total += n
		}
		if cerr != 0 {
			if e := syscall.Errno(cerr); e == syscall.EAGAIN || e == syscall.EINTR {
				return total, nil
			}
			return total, fmt.Errorf("kvevents: receive: %w", syscall.Errno(cerr))
		}
	}
	return total, nil
}

// deliver copies the n messages kv_recv left in r.msgs into one buffer and
// hands them to fn.
func (r *reader) deliver(n int, fn func(frames [][]byte)) {
	size := 0
	for i := range n {
		for j := range min(int(r.frames[i]), recvFrames) {
			size += int(r.sizes[i*recvFrames+j])
		}
	}
	buf := make([]byte, size)
	var dst *C.char
	if size > 0 {
		dst = (*C.char)(unsafe.Pointer(&buf[0]))
	}
	C.kv_copy(r.msgs, C.int(n), (*C.int32_t)(unsafe.Pointer(&r.frames[0])), dst)
	off := 0
	for i := range n {
		nf := int(r.frames[i])
		kept := min(nf, recvFrames)
		for j := range kept {
			sz := int(r.sizes[i*recvFrames+j])
			r.views[j] = buf[off : off+sz : off+sz]
			off += sz
		}
		if nf > recvFrames {
			// More frames than any valid message has: pass the count on
			// as nil frames so the caller rejects it.
			fn(append(r.views[:kept:kept], make([][]byte, nf-kept)...))
			continue
		}
		fn(r.views[:kept])
	}
	clear(r.views[:])
}

func (r *reader) drainSlow(limit int, fn func(frames [][]byte)) (int, error) {
	for n := range limit {
		frames, err := r.sock.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if e := zmq.AsErrno(err); e == zmq.Errno(syscall.EAGAIN) || e == zmq.Errno(syscall.EINTR) {
				return n, nil
			}
			return n, fmt.Errorf("kvevents: receive: %w", err)
		}
		fn(frames)
	}
	return limit, nil
}
