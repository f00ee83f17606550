package kvevents

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// pairSockets returns two connected PAIR sockets over inproc.
func pairSockets(t *testing.T) (send, recv *zmq.Socket) {
	t.Helper()
	addr := fmt.Sprintf("inproc://kvevents-recv-test-%d", monitorSeq.Add(1))
	recv, err := zmq.NewSocket(zmq.PAIR)
	if err != nil {
		t.Fatal(err)
	}
	send, err = zmq.NewSocket(zmq.PAIR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := closeSockets(send, recv); err != nil {
			t.Error(err)
		}
	})
	if err := recv.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := send.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := recv.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := send.Connect(addr); err != nil {
		t.Fatal(err)
	}
	return send, recv
}

// waitReadable blocks until sock has a message.
func waitReadable(t *testing.T, sock *zmq.Socket) {
	t.Helper()
	p := zmq.NewPoller()
	p.Add(sock, zmq.POLLIN)
	polled, err := p.Poll(10 * time.Second)
	if err != nil || len(polled) == 0 {
		t.Fatalf("socket not readable: %v", err)
	}
}

// The fast path must be the one taken: a zmq4 release that shows its
// sockets differently fails here instead of silently slowing every pod.
func TestReaderUsesLibzmqDirectly(t *testing.T) {
	_, recv := pairSockets(t)
	r := newReader(recv)
	defer r.close()
	if !r.fast() {
		t.Fatalf("reader fell back to RecvMessageBytes: socket shows as %q", recv.String())
	}
}

func TestSocketHandleRejectsOtherForms(t *testing.T) {
	for _, s := range []string{"Socket(CLOSED)", "Socket(SUB,\"id\")", "Socket(SUB,0x)", "Socket(SUB,0xzz)", "Socket(SUB,0x0)"} {
		if h, ok := parseSocketHandle(s); ok {
			t.Errorf("parseSocketHandle(%q) = %#x, want none", s, h)
		}
	}
	if h, ok := parseSocketHandle("Socket(SUB,0xc000123abc)"); !ok || h != 0xc000123abc {
		t.Errorf("parseSocketHandle = %#x, %v", h, ok)
	}
}

// Both paths read the same messages the same way: every frame, empty
// frames, frame counts above what is kept, and a run longer than one C
// batch; a message kept by the caller is not overwritten by later reads.
func TestReaderDrain(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			send, recv := pairSockets(t)
			r := newReader(recv)
			defer r.close()
			if !fast {
				r.close() // without its C buffers the reader falls back
			}
			var want [][][]byte
			for i := range recvBatch + 44 {
				msg := [][]byte{[]byte("topic"), fmt.Appendf(nil, "%08d", i), bytes.Repeat([]byte{byte(i)}, i%97)}
				switch i % 50 {
				case 7:
					msg = append(msg, []byte{}, []byte("x"), []byte("yz")) // 6 frames
				case 9:
					msg = [][]byte{{}} // one empty frame
				}
				if _, err := send.SendMessage(msg); err != nil {
					t.Fatal(err)
				}
				want = append(want, msg)
			}
			var got [][][]byte
			for len(got) < len(want) {
				waitReadable(t, recv)
				n, err := r.drain(len(want)-len(got), func(frames [][]byte) {
					got = append(got, append([][]byte(nil), frames...))
				})
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					t.Fatal("readable socket drained nothing")
				}
			}
			if n, err := r.drain(10, func([][]byte) { t.Error("message after the last") }); n != 0 || err != nil {
				t.Fatalf("drain of an empty socket = %d, %v", n, err)
			}
			for i := range want {
				if len(got[i]) != len(want[i]) {
					t.Fatalf("message %d: %d frames, want %d", i, len(got[i]), len(want[i]))
				}
				for j := range want[i] {
					keep := fast && j >= recvFrames
					if keep && got[i][j] != nil {
						t.Errorf("message %d frame %d beyond the kept ones = %q, want nil", i, j, got[i][j])
					}
					if !keep && !bytes.Equal(got[i][j], want[i][j]) {
						t.Errorf("message %d frame %d = %q, want %q", i, j, got[i][j], want[i][j])
					}
				}
			}
		})
	}
}

// drain stops at max and leaves the rest on the socket.
func TestReaderDrainMax(t *testing.T) {
	send, recv := pairSockets(t)
	r := newReader(recv)
	defer r.close()
	for i := range 5 {
		if _, err := send.SendMessage("t", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	take := func(frames [][]byte) { got = append(got, string(frames[1])) }
	waitReadable(t, recv)
	for len(got) < 3 {
		if _, err := r.drain(3-len(got), take); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 3 {
		t.Fatalf("drain(3) took %v", got)
	}
	for len(got) < 5 {
		if _, err := r.drain(10, take); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Fatalf("got %v", got)
	}
}

// A live batch shares its run's buffer; once the connection idles, the
// stream keeps a copy of the last batch only, not the run.
func TestDetachLastCopiesOutOfTheRun(t *testing.T) {
	run := []byte("aaaaBATCHbbbb")
	st := &stream{last: run[4:9], lastShared: true}
	st.detachLast()
	if string(st.last) != "BATCH" || st.lastShared || &st.last[0] == &run[4] {
		t.Fatalf("after detachLast: last %q shared %v, same memory %v", st.last, st.lastShared, &st.last[0] == &run[4])
	}
	kept := &st.last[0]
	st.detachLast()
	if &st.last[0] != kept {
		t.Fatal("a second detachLast copied again")
	}
}
