package keyfetch

import (
	"context"
	"errors"
	"net/http"
)

// Reason names, in one stable snake_case word, why a key set was refused
// or could not be fetched, for logs and metrics (ReasonOf). The error text
// says the same with the details: the host and the patterns, the status,
// the network error.
type Reason string

// The reasons ReasonOf reports.
const (
	// ReasonInvalidURL: the URL is not an absolute http(s) URL without user
	// information or fragment, or its host is malformed. Nothing was sent.
	ReasonInvalidURL Reason = "invalid_url"
	// ReasonUntrustedHost: no TrustedHosts pattern matches the host (on
	// that port). Nothing was sent.
	ReasonUntrustedHost Reason = "untrusted_host"
	// ReasonHTTPRefused: the URL is plain http and AllowHTTP is off.
	// Nothing was sent.
	ReasonHTTPRefused Reason = "http_refused"
	// ReasonPrivateAddress: the host is, or resolves to, a loopback,
	// private or otherwise non-public address and AllowPrivateNetworks is
	// off. No connection was made.
	ReasonPrivateAddress Reason = "private_address"
	// ReasonHostBusy: MaxFetchesPerHost fetches to the host were already
	// in flight.
	ReasonHostBusy Reason = "host_busy"
	// ReasonTimeout: the fetch ran out of time (Timeout).
	ReasonTimeout Reason = "timeout"
	// ReasonCanceled: every caller waiting for the fetch went away.
	ReasonCanceled Reason = "canceled"
	// ReasonNetwork: the connection failed (DNS, refused, reset, TLS).
	ReasonNetwork Reason = "network_error"
	// ReasonStatus: the answer was not 200 (a redirect, which is never
	// followed, an error, or a 404 replacing a set that was served before).
	ReasonStatus Reason = "bad_status"
	// ReasonDocument: the answer was unusable: media type, size, JSON,
	// too many keys.
	ReasonDocument Reason = "invalid_document"
	// ReasonDirectorySignature: a directory signature on the answer does
	// not verify (ErrDirectorySignature).
	ReasonDirectorySignature Reason = "directory_signature"
	// ReasonUnsignedDirectory: RequireSignedDirectories is set and no
	// verified directory signature covers the body (ErrUnsignedDirectory).
	ReasonUnsignedDirectory Reason = "unsigned_directory"
)

// ErrHostBusy is wrapped by the fetch error when MaxFetchesPerHost fetches
// to the key set's host are already in flight.
var ErrHostBusy = errors.New("keyfetch: too many fetches in flight to this host")

// errAbandoned cancels a shared fetch when every caller waiting for it has
// gone.
var errAbandoned = errors.New("every caller waiting for the fetch went away")

// ReasonOf returns the reason of an error from a Fetcher: why the key set
// was refused (an *UntrustedError) or could not be fetched (a
// *FetchError). It returns "" for nil and for errors that are neither (an
// unknown key, for instance).
func ReasonOf(err error) Reason {
	var ue *UntrustedError
	if errors.As(err, &ue) {
		return ue.Reason
	}
	var fe *FetchError
	if errors.As(err, &fe) {
		return fe.Reason()
	}
	return ""
}

// Reason classifies the failure (see ReasonOf).
func (e *FetchError) Reason() Reason {
	err := e.Err
	switch {
	case errors.Is(err, ErrPrivateAddress):
		return ReasonPrivateAddress
	case errors.Is(err, ErrHostBusy):
		return ReasonHostBusy
	case errors.Is(err, ErrDirectorySignature):
		return ReasonDirectorySignature
	case errors.Is(err, ErrUnsignedDirectory):
		return ReasonUnsignedDirectory
	case errors.Is(err, errAbandoned), errors.Is(err, context.Canceled):
		return ReasonCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case e.StatusCode == 0:
		if ue := (*UntrustedError)(nil); errors.As(err, &ue) {
			return ue.Reason
		}
		return ReasonNetwork
	case e.StatusCode != http.StatusOK && e.StatusCode != http.StatusNotModified:
		return ReasonStatus
	}
	return ReasonDocument
}
