// Command loadgen drives a Querator node from many goroutines, for bench/load.py --driver go: a client
// that costs the shared cores far less than Python clients, so that what the node can do shows, not
// what its clients can (docs/benchmarks-log.md, "Small requests"). Each goroutine loops on one -op: a
// produce -> lease -> complete cycle, or produce, lease or complete alone (complete takes its leased
// ids from -ids, a JSON list per goroutine of {"partition": N, "ids": [...]}, cycled with -repeat).
//
//	loadgen -url http://127.0.0.1:2319 -queue bench -op cycle -batch 1 -workers 24 -duration 5s
//
// It prints {"items": N, "requests": N, "dry": N, "cpu_s": S} as bench/load.py's Python clients do, with
// its own CPU time. Bodies are binary protobuf (or JSON with -json), encoded by hand: the five messages
// it needs do not justify generated code.
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const protobufType = "application/protobuf"

// client is one worker's: its own keep-alive connection, as a consumer holding one would, so that its
// produce, lease and complete reach the same process of a node of several (docs/processes.md). It
// speaks HTTP/1.1 itself, one request at a time: net/http's client cost about 35 us of CPU per request,
// a third of what the node spends, on the two cores they share.
type client struct {
	host    string
	conn    net.Conn
	reader  *bufio.Reader
	out     []byte
	queue   string
	batch   int
	json    bool
	payload []byte
}

type leased struct {
	Partition int      `json:"partition"`
	IDs       []string `json:"ids"`
}

// share is what one goroutine's completes complete, in order; with repeat, over and over.
type share struct {
	batches []leased
	next    int
	repeat  bool
}

func (s *share) take() (leased, bool) {
	if s.next == len(s.batches) {
		if !s.repeat || len(s.batches) == 0 {
			return leased{}, false
		}
		s.next = 0
	}
	s.next++
	return s.batches[s.next-1], true
}

func main() {
	baseURL := flag.String("url", "", "the node's base URL")
	queue := flag.String("queue", "bench", "queue name")
	batch := flag.Int("batch", 1, "items per request")
	workers := flag.Int("workers", 24, "concurrent cycles")
	duration := flag.Duration("duration", 5*time.Second, "how long to run")
	useJSON := flag.Bool("json", false, "JSON bodies instead of binary protobuf")
	op := flag.String("op", "cycle", "cycle, produce, lease or complete")
	idsFile := flag.String("ids", "", "for -op complete: the leased ids of each goroutine (JSON)")
	repeat := flag.Bool("repeat", false, "complete the -ids over and over")
	flag.Parse()
	base, err := url.Parse(*baseURL)
	if err != nil || base.Scheme != "http" {
		fmt.Fprintln(os.Stderr, "loadgen: -url must be http://host:port")
		os.Exit(2)
	}
	shares := make([][]leased, *workers)
	if *op == "complete" {
		if shares, err = readShares(*idsFile, *workers); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(2)
		}
	}
	payload := bytes.Repeat([]byte{'x'}, 1024)
	var items, requests, dry atomic.Int64
	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := &client{
				host:    base.Host,
				queue:   *queue,
				batch:   *batch,
				json:    *useJSON,
				payload: payload,
			}
			clientID := "loadgen-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(w)
			mine := &share{batches: shares[w], repeat: *repeat}
			for time.Now().Before(deadline) {
				moved, made, ranDry, err := c.step(*op, clientID, mine)
				if err != nil {
					errs <- err
					return
				}
				items.Add(int64(moved))
				requests.Add(int64(made))
				if ranDry {
					dry.Add(1)
					if *op == "complete" {
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	var usage syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &usage)
	cpu := time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
	fmt.Printf("{\"items\": %d, \"requests\": %d, \"dry\": %d, \"cpu_s\": %.3f}\n",
		items.Load(), requests.Load(), dry.Load(), cpu.Seconds())
}

// readShares reads -ids: one list of leased batches per goroutine.
func readShares(path string, workers int) ([][]leased, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var shares [][]leased
	if err := json.Unmarshal(data, &shares); err != nil {
		return nil, err
	}
	if len(shares) != workers {
		return nil, fmt.Errorf("%s has %d shares for %d workers", path, len(shares), workers)
	}
	return shares, nil
}

// step runs one -op: the items it moved, the requests it made, and whether it found nothing to lease
// (or, for complete, nothing left to complete).
func (c *client) step(op, clientID string, mine *share) (int, int, bool, error) {
	switch op {
	case "produce":
		return c.batch, 1, false, c.produce()
	case "lease":
		got, err := c.lease(clientID)
		return len(got.IDs), 1, len(got.IDs) == 0, err
	case "complete":
		got, ok := mine.take()
		if !ok {
			return 0, 0, true, nil
		}
		return len(got.IDs), 1, false, c.complete(got)
	case "cycle":
		if err := c.produce(); err != nil {
			return 0, 1, false, err
		}
		got, err := c.lease(clientID)
		if err != nil || len(got.IDs) == 0 {
			return 0, 2, err == nil, err
		}
		return len(got.IDs), 3, false, c.complete(got)
	}
	return 0, 0, false, fmt.Errorf("unknown -op %q", op)
}

func (c *client) produce() error {
	var body []byte
	if c.json {
		item := map[string]string{"bytes": base64.StdEncoding.EncodeToString(c.payload)}
		items := make([]map[string]string, c.batch)
		for i := range items {
			items[i] = item
		}
		body, _ = json.Marshal(map[string]any{"queue_name": c.queue, "request_timeout": "1m", "items": items})
	} else {
		item := appendBytes(nil, 5, c.payload)
		body = appendString(nil, 1, c.queue)
		body = appendString(body, 2, "1m")
		for i := 0; i < c.batch; i++ {
			body = appendBytes(body, 3, item)
		}
	}
	_, err := c.post("/v1/queue.produce", body)
	return err
}

func (c *client) lease(clientID string) (leased, error) {
	var body []byte
	if c.json {
		body, _ = json.Marshal(map[string]any{
			"queue_name": c.queue, "batch_size": c.batch, "client_id": clientID, "request_timeout": "5s",
		})
	} else {
		body = appendString(nil, 1, c.queue)
		body = appendVarint(body, 2, uint64(c.batch))
		body = appendString(body, 3, clientID)
		body = appendString(body, 4, "5s")
	}
	reply, err := c.post("/v1/queue.lease", body)
	if err != nil {
		return leased{}, err
	}
	if c.json {
		var r struct {
			Partition int                   `json:"partition"`
			Items     []struct{ ID string } `json:"items"`
		}
		if err := json.Unmarshal(reply, &r); err != nil {
			return leased{}, err
		}
		got := leased{Partition: r.Partition}
		for _, i := range r.Items {
			got.IDs = append(got.IDs, i.ID)
		}
		return got, nil
	}
	return decodeLease(reply)
}

func (c *client) complete(got leased) error {
	var body []byte
	if c.json {
		body, _ = json.Marshal(map[string]any{
			"queue_name": c.queue, "partition": got.Partition, "ids": got.IDs, "request_timeout": "1m",
		})
	} else {
		body = appendString(nil, 1, c.queue)
		body = appendVarint(body, 2, uint64(got.Partition))
		body = appendString(body, 3, "1m")
		for _, id := range got.IDs {
			body = appendString(body, 4, id)
		}
	}
	_, err := c.post("/v1/queue.complete", body)
	return err
}

// post sends one request on the worker's connection (dialled on first use, again after the node closed
// it) and returns the reply's body, which must come with a Content-Length, as the node's do.
func (c *client) post(path string, body []byte) ([]byte, error) {
	if c.conn == nil {
		conn, err := net.Dial("tcp", c.host)
		if err != nil {
			return nil, err
		}
		c.conn, c.reader = conn, bufio.NewReaderSize(conn, 16<<10)
	}
	contentType := protobufType
	if c.json {
		contentType = "application/json"
	}
	b := append(c.out[:0], "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\nContent-Type: "...)
	b = append(b, contentType...)
	b = append(b, "\r\nAccept: "...)
	b = append(b, contentType...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	c.out = append(b, body...)
	if _, err := c.conn.Write(c.out); err != nil {
		return nil, err
	}
	status, size, closing, err := readHead(c.reader)
	if err != nil {
		return nil, err
	}
	reply := make([]byte, size)
	if _, err := io.ReadFull(c.reader, reply); err != nil {
		return nil, err
	}
	if closing {
		c.conn.Close()
		c.conn = nil
	}
	if status != 200 {
		return nil, fmt.Errorf("%s: %d %q", path, status, reply)
	}
	return reply, nil
}

// readHead reads a reply's status line and headers: its status, Content-Length, and whether the node
// closes the connection after it.
func readHead(r *bufio.Reader) (status, size int, closing bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, 0, false, fmt.Errorf("not an HTTP reply: %q", line)
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, 0, false, err
	}
	size = -1
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, err
		}
		header := bytes.TrimRight(line, "\r\n")
		if len(header) == 0 {
			break
		}
		name, value, _ := bytes.Cut(header, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if size, err = strconv.Atoi(string(value)); err != nil {
				return 0, 0, false, err
			}
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	if size < 0 {
		return 0, 0, false, errors.New("a reply without Content-Length")
	}
	return status, size, closing, nil
}

// -- protobuf's wire format, the little of it used here ---------------------------------------------

func appendTag(b []byte, field int, wireType uint64) []byte {
	return appendUvarint(b, uint64(field)<<3|wireType)
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendVarint(b []byte, field int, v uint64) []byte {
	return appendUvarint(appendTag(b, field, 0), v)
}

func appendBytes(b []byte, field int, v []byte) []byte {
	b = appendUvarint(appendTag(b, field, 2), uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, field int, v string) []byte {
	return appendBytes(b, field, []byte(v))
}

var errTruncated = errors.New("truncated protobuf")

func readUvarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errTruncated
}

// fields calls fn with each field of a message: its number and, for length-delimited ones, its bytes
// (for varints, value holds the number).
func fields(b []byte, fn func(field int, value uint64, data []byte)) error {
	for len(b) > 0 {
		key, n, err := readUvarint(b)
		if err != nil {
			return err
		}
		b = b[n:]
		field := int(key >> 3)
		switch key & 7 {
		case 0:
			v, n, err := readUvarint(b)
			if err != nil {
				return err
			}
			fn(field, v, nil)
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return errTruncated
			}
			b = b[8:]
		case 2:
			size, n, err := readUvarint(b)
			if err != nil || uint64(len(b)-n) < size {
				return errTruncated
			}
			fn(field, 0, b[n:n+int(size)])
			b = b[n+int(size):]
		case 5:
			if len(b) < 4 {
				return errTruncated
			}
			b = b[4:]
		default:
			return fmt.Errorf("unknown wire type %d", key&7)
		}
	}
	return nil
}

// decodeLease reads a QueueLeaseResponse: partition = 2, items = 3, each item's id = 4.
func decodeLease(b []byte) (leased, error) {
	var got leased
	var itemErr error
	err := fields(b, func(field int, value uint64, data []byte) {
		switch field {
		case 2:
			got.Partition = int(value)
		case 3:
			if e := fields(data, func(f int, _ uint64, d []byte) {
				if f == 4 {
					got.IDs = append(got.IDs, string(d))
				}
			}); e != nil {
				itemErr = e
			}
		}
	})
	if err == nil {
		err = itemErr
	}
	return got, err
}
