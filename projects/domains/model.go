package domains

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
	"time"
)

// Record is a DNS record the owner creates at their DNS provider.
type Record struct {
	Type    string `json:"type" enum:"TXT,CNAME,A,AAAA,ALIAS" doc:"Record type. ALIAS: your DNS provider's CNAME flattening at the apex (also called ANAME)"`
	Name    string `json:"name" doc:"The record's name (fully qualified)"`
	Value   string `json:"value" doc:"The record's value"`
	Purpose string `json:"purpose" enum:"ownership,routing" doc:"ownership: proves the domain is yours; routing: sends its traffic to Keelson"`
}

// Domain is a custom domain as the API answers it.
type Domain struct {
	ID        string `json:"id" doc:"Domain id (UUID)"`
	ProjectID string `json:"projectId" doc:"Project id"`
	Hostname  string `json:"hostname" doc:"The hostname, normalised: lower case, international names in their ASCII (Punycode) form"`
	// UnicodeHostname is shown for international names only.
	UnicodeHostname string `json:"unicodeHostname,omitempty" doc:"The hostname in Unicode, for international names"`
	Status          string `json:"status" enum:"pending,verified,active,error" doc:"pending: the ownership TXT record was not seen yet; verified: owned, but its routing records do not point at Keelson yet; active: served; error: was active, but its records no longer point at Keelson (it is served again once they do)"`
	// LastError says what to fix, in words a user can act on.
	LastError            string     `json:"lastError,omitempty" doc:"What the last check found wrong, and what to do about it"`
	Records              []Record   `json:"records" doc:"The DNS records to create"`
	CertificateStatus    string     `json:"certificateStatus" enum:"none,pending,issued,error" doc:"The HTTPS certificate's status (none until the ingress has issued one)"`
	CertificateExpiresAt *time.Time `json:"certificateExpiresAt,omitempty" doc:"When the certificate expires"`
	HSTS                 bool       `json:"hsts" doc:"HTTPS answers for this hostname carry Strict-Transport-Security (max-age one year; never on plain HTTP). Off by default: once browsers saw it they refuse plain HTTP to the hostname for that long"`
	VerifiedAt           *time.Time `json:"verifiedAt,omitempty" doc:"When ownership was proven"`
	CheckedAt            time.Time  `json:"checkedAt" doc:"When the records were last checked (or the domain added)"`
	CreatedAt            time.Time  `json:"createdAt"`
	UpdatedAt            time.Time  `json:"updatedAt"`
}

// SchemaName methods name these types in the OpenAPI document.
func (Record) SchemaName() string { return "DomainRecord" }
func (Domain) SchemaName() string { return "Domain" }

// tokenPrefix starts every ownership token, so it is recognisable in a zone.
const tokenPrefix = "keelson-verify="

// newToken is a random ownership token (160 bits).
func newToken() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return tokenPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

func (s *Service) out(r *domainRow) *Domain {
	d := &Domain{
		ID: r.ID, ProjectID: r.ProjectID, Hostname: r.Hostname, UnicodeHostname: Display(r.Hostname),
		Status: r.Status, LastError: r.LastError, Records: s.records(r.Hostname, r.Slug, r.Token),
		CertificateStatus: r.CertStatus, CertificateExpiresAt: utc(r.CertExpiresAt), HSTS: r.HSTS, VerifiedAt: utc(r.VerifiedAt),
		CheckedAt: r.CheckedAt.UTC(), CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
	return d
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// records are what the owner of hostname creates: the ownership TXT, then a
// CNAME to the app's host, or for an apex domain A/AAAA records to the
// ingress addresses (an ALIAS to the app's host when none are set).
func (s *Service) records(hostname, slug, token string) []Record {
	out := []Record{{Type: "TXT", Name: challengeName(hostname), Value: token, Purpose: "ownership"}}
	if !isApex(hostname) {
		return append(out, Record{Type: "CNAME", Name: hostname, Value: s.appHost(slug), Purpose: "routing"})
	}
	for _, ip := range s.d.IngressIPs {
		t := "A"
		if ip.Is6() {
			t = "AAAA"
		}
		out = append(out, Record{Type: t, Name: hostname, Value: ip.String(), Purpose: "routing"})
	}
	if len(s.d.IngressIPs) == 0 {
		out = append(out, Record{Type: "ALIAS", Name: hostname, Value: s.appHost(slug), Purpose: "routing"})
	}
	return out
}
