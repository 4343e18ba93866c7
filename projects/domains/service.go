package domains

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// project checks that the caller may act on projectID with perm (through
// Deps.Access; without it, that the project is the caller's) and answers
// its owner account, answering "project not found" (404) for anything else.
func (s *Service) project(ctx context.Context, caller, projectID string, perm platform.Permission) (string, *Project, error) {
	if !platform.ValidID(projectID) {
		return "", nil, platform.NotFound("project not found")
	}
	ownerID, err := caller, error(nil)
	if s.d.Access != nil {
		ownerID, err = s.d.Access.Authorize(ctx, caller, projectID, perm)
	}
	var p *Project
	if err == nil {
		p, err = s.d.Projects.Project(ctx, ownerID, projectID)
	}
	if errors.Is(err, platform.ErrNotFound) {
		return "", nil, platform.NotFound("project not found")
	}
	var pe *platform.Error
	if errors.As(err, &pe) {
		return "", nil, err
	}
	if err != nil {
		return "", nil, fmt.Errorf("domains: project: %w", err)
	}
	return ownerID, p, nil
}

// Create adds hostname to the owner's project and returns it (pending) with
// the records to create. A hostname another account holds is a 409 carrying
// a token of the caller's own; once a TXT record holds that token, Create
// moves the hostname here (verified) and tells its old owner.
func (s *Service) Create(ctx context.Context, caller, projectID, hostname string) (*Domain, error) {
	ownerID, p, err := s.project(ctx, caller, projectID, platform.DomainsWrite)
	if err != nil {
		return nil, err
	}
	h, err := Normalize(hostname)
	if err != nil {
		return nil, err
	}
	if err := s.checkHostname(h); err != nil {
		return nil, err
	}
	if !p.CustomDomains {
		return nil, platform.Forbidden(fmt.Sprintf("the plan %q does not include custom domains; choose a plan with customDomains for this project", p.PlanName))
	}
	held, err := s.byHostname(ctx, s.d.DB, h)
	if err != nil && !errors.Is(err, platform.ErrNotFound) {
		return nil, err
	}
	if held != nil {
		return s.claim(ctx, ownerID, projectID, p.Slug, held)
	}
	now := s.now()
	row := &domainRow{ID: platform.NewID(), ProjectID: projectID, OwnerID: ownerID, Hostname: h, Slug: p.Slug,
		Token: newToken(), Status: StatusPending, CertStatus: CertificateNone, CheckedAt: now, CreatedAt: now, UpdatedAt: now}
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if err := s.checkCap(ctx, tx, projectID); err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, row, "domain.create", "added")
	})
	if err = db.Translate(err); errors.Is(err, platform.ErrConflict) {
		return nil, platform.Conflict(fmt.Sprintf("hostname: %s was just added elsewhere; try again", h))
	}
	if err != nil {
		return nil, err
	}
	return s.out(row), nil
}

// checkCap refuses a domain past Deps.MaxPerProject. It runs in the insert's
// transaction under the project's lock, so concurrent adds cannot pass it together.
func (s *Service) checkCap(ctx context.Context, tx bun.Tx, projectID string) error {
	if err := db.LockTx(ctx, tx, "keelson:domains:"+projectID); err != nil {
		return err
	}
	n, err := tx.NewSelect().Model((*domainRow)(nil)).Where("project_id = ?", projectID).Count(ctx)
	if err != nil {
		return err
	}
	if int(n) >= s.d.MaxPerProject {
		return platform.Forbidden(fmt.Sprintf("a project has at most %d custom domains; delete one first", s.d.MaxPerProject))
	}
	return nil
}

func (s *Service) byHostname(ctx context.Context, idb bun.IDB, h string) (*domainRow, error) {
	row := new(domainRow)
	if err := idb.NewSelect().Model(row).Where("hostname = ?", h).Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	return row, nil
}

// claim answers an add of a hostname that is already held: a 409, unless it
// is another account's and a TXT record holds the caller's claim token.
func (s *Service) claim(ctx context.Context, ownerID, projectID, slug string, held *domainRow) (*Domain, error) {
	h := held.Hostname
	if held.ProjectID == projectID {
		return nil, platform.Conflict(fmt.Sprintf("hostname: %s is already a domain of this project", h))
	}
	if held.OwnerID == ownerID {
		return nil, platform.Conflict(fmt.Sprintf("hostname: %s is a domain of another of your projects (%s); delete it there first", h, held.ProjectID))
	}
	c, err := s.claimToken(ctx, ownerID, projectID, h)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, s.d.LookupTimeout)
	f := s.checkOwnership(lctx, h, c.Token)
	cancel()
	if !f.ok {
		return nil, platform.Conflict(fmt.Sprintf("hostname: %s is a domain of another account. To move it to this project, prove that you control its DNS: create a TXT record at %s with value %s, then add the domain again (this token is valid for 7 days)",
			h, challengeName(h), c.Token))
	}
	row, err := s.move(ctx, held, c, slug)
	if err != nil {
		return nil, err
	}
	s.notify(held.OwnerID, "Your custom domain "+h+" was moved to another account",
		fmt.Sprintf("Someone proved control of the DNS of %s (a TXT record at %s) and added it to a project of their own Keelson account.\n\n"+
			"It is no longer a domain of your project %s and is not served by it any more. If this was not expected, check who can change your domain's DNS records.\n",
			h, challengeName(h), held.ProjectID))
	return s.checkNow(ctx, row)
}

// claimToken returns the caller's claim on h, making one (and dropping the
// project's oldest claims past the cap) when there is none or it expired.
func (s *Service) claimToken(ctx context.Context, ownerID, projectID, h string) (*claimRow, error) {
	c := new(claimRow)
	err := s.d.DB.NewSelect().Model(c).Where("hostname = ? AND project_id = ?", h, projectID).Scan(ctx)
	if err == nil && s.now().Sub(c.CreatedAt) < claimTTL {
		return c, nil
	}
	if err = db.Translate(err); err != nil && !errors.Is(err, platform.ErrNotFound) {
		return nil, err
	}
	c = &claimRow{ID: platform.NewID(), ProjectID: projectID, OwnerID: ownerID, Hostname: h, Token: newToken(), CreatedAt: s.now()}
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if err := db.LockTx(ctx, tx, "keelson:domains:"+projectID); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*claimRow)(nil)).Where("hostname = ? AND project_id = ?", h, projectID).Exec(ctx); err != nil {
			return err
		}
		var keep []string
		if err := tx.NewSelect().Model((*claimRow)(nil)).Column("id").Where("project_id = ?", projectID).
			Order("created_at DESC").Limit(int64(s.d.MaxPerProject-1)).Scan(ctx, &keep); err != nil {
			return err
		}
		q := tx.NewDelete().Model((*claimRow)(nil)).Where("project_id = ?", projectID)
		if len(keep) > 0 {
			q = q.Where("id NOT IN (?)", bun.In(keep))
		}
		if _, err := q.Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewInsert().Model(c).Exec(ctx)
		return err
	})
	if err = db.Translate(err); err != nil {
		if errors.Is(err, platform.ErrConflict) {
			return nil, platform.Conflict(fmt.Sprintf("hostname: %s is being added concurrently; try again", h))
		}
		return nil, err
	}
	return c, nil
}

// move gives held's hostname to c's project, verified by c's token.
func (s *Service) move(ctx context.Context, held *domainRow, c *claimRow, slug string) (*domainRow, error) {
	now := s.now()
	row := &domainRow{ID: platform.NewID(), ProjectID: c.ProjectID, OwnerID: c.OwnerID, Hostname: held.Hostname, Slug: slug,
		Token: c.Token, Status: StatusVerified, CertStatus: CertificateNone, VerifiedAt: &now, CheckedAt: now, CreatedAt: now, UpdatedAt: now}
	err := db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewDelete().Model((*domainRow)(nil)).Where("id = ?", held.ID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return platform.Conflict(fmt.Sprintf("hostname: %s changed meanwhile; try again", held.Hostname))
		}
		if err := s.checkCap(ctx, tx, c.ProjectID); err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return err
		}
		if _, err = tx.NewDelete().Model((*claimRow)(nil)).Where("hostname = ?", held.Hostname).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, row, "domain.create", "added (moved from project "+held.ProjectID+" by its TXT record)")
	})
	if err = db.Translate(err); errors.Is(err, platform.ErrConflict) && !isPublic(err) {
		return nil, platform.Conflict(fmt.Sprintf("hostname: %s changed meanwhile; try again", held.Hostname))
	}
	if err != nil {
		return nil, err
	}
	s.d.Log.InfoContext(ctx, "domains: hostname moved by proof of its TXT record", "hostname", held.Hostname,
		"from_project", held.ProjectID, "to_project", c.ProjectID)
	if held.Status == StatusActive {
		s.activeChanged(ctx, held.ProjectID)
	}
	return row, nil
}

// isPublic reports whether err is already a message for the client.
func isPublic(err error) bool {
	var pe *platform.Error
	return errors.As(err, &pe)
}

// ListParams page List.
type ListParams struct {
	Limit int
	After *platform.Cursor
}

// List returns the domains of the owner's project, newest first, and the
// cursor of the next page ("" on the last).
func (s *Service) List(ctx context.Context, caller, projectID string, p ListParams) ([]*Domain, string, error) {
	ownerID, _, err := s.project(ctx, caller, projectID, platform.DomainsRead)
	if err != nil {
		return nil, "", err
	}
	p.Limit = platform.PageParams{Limit: p.Limit}.Size()
	q := s.d.DB.NewSelect().Model((*domainRow)(nil)).Where("project_id = ? AND owner_id = ?", projectID, ownerID)
	rows, next, err := db.ReadPage(ctx, q, db.Keyset{Time: "created_at", ID: "id"}, p.After, p.Limit,
		func(last domainRow) platform.Cursor { return platform.Cursor{Time: last.CreatedAt, ID: last.ID} })
	if err != nil {
		return nil, "", db.Translate(err)
	}
	out := make([]*Domain, len(rows))
	for i := range rows {
		out[i] = s.out(&rows[i])
	}
	return out, next, nil
}

// row returns domainID of the project when the caller holds perm on it, or a 404.
func (s *Service) row(ctx context.Context, caller, projectID, domainID string, perm platform.Permission) (*domainRow, error) {
	ownerID, _, err := s.project(ctx, caller, projectID, perm)
	if err != nil {
		return nil, err
	}
	if !platform.ValidID(domainID) {
		return nil, platform.NotFound("domain not found")
	}
	row := new(domainRow)
	err = s.d.DB.NewSelect().Model(row).Where("id = ? AND project_id = ? AND owner_id = ?", domainID, projectID, ownerID).Scan(ctx)
	if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
		return nil, platform.NotFound("domain not found")
	}
	return row, err
}

// Get returns a domain of the owner's project.
func (s *Service) Get(ctx context.Context, ownerID, projectID, domainID string) (*Domain, error) {
	row, err := s.row(ctx, ownerID, projectID, domainID, platform.DomainsRead)
	if err != nil {
		return nil, err
	}
	return s.out(row), nil
}

// Verify checks the domain's records now and returns it with what was found:
// a pending domain whose TXT record holds its token becomes verified, and a
// verified one whose routing records point at Keelson active. A domain that
// stays pending says why in lastError.
func (s *Service) Verify(ctx context.Context, ownerID, projectID, domainID string) (*Domain, error) {
	row, err := s.row(ctx, ownerID, projectID, domainID, platform.DomainsWrite)
	if err != nil {
		return nil, err
	}
	d, err := s.checkNow(ctx, row)
	if err != nil {
		return nil, err
	}
	// After the check (the periodic one shares it and records nothing): its own write.
	return d, s.record(ctx, s.d.DB, row, "domain.verify", "checked ("+string(d.Status)+")")
}

// Update applies in to a domain of the project (admin: DomainsWrite) and
// returns it; a field left out keeps its value.
func (s *Service) Update(ctx context.Context, caller, projectID, domainID string, in UpdateDomainRequest) (*Domain, error) {
	row, err := s.row(ctx, caller, projectID, domainID, platform.DomainsWrite)
	if err != nil {
		return nil, err
	}
	if in.HSTS == nil || *in.HSTS == row.HSTS {
		return s.out(row), nil
	}
	row.HSTS, row.UpdatedAt = *in.HSTS, s.now()
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewUpdate().Model(row).Column("hsts", "updated_at").Where("id = ?", row.ID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return platform.NotFound("domain not found") // deleted or moved meanwhile
		}
		return s.record(ctx, tx, row, "domain.update", fmt.Sprintf("hsts %v", row.HSTS))
	})
	if err != nil {
		return nil, db.Translate(err)
	}
	s.d.Log.InfoContext(ctx, "domains: hsts changed", "hostname", row.Hostname, "hsts", row.HSTS)
	if row.Status == StatusActive {
		s.activeChanged(ctx, projectID)
	}
	return s.out(row), nil
}

// Delete removes a domain of the owner's project.
func (s *Service) Delete(ctx context.Context, ownerID, projectID, domainID string) error {
	row, err := s.row(ctx, ownerID, projectID, domainID, platform.DomainsWrite)
	if err != nil {
		return err
	}
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewDelete().Model((*domainRow)(nil)).Where("id = ?", row.ID).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, row, "domain.delete", "deleted")
	})
	if err != nil {
		return db.Translate(err)
	}
	if row.Status == StatusActive {
		s.activeChanged(ctx, projectID)
	}
	return nil
}

// DeleteProject removes every domain and claim of a project (its teardown).
func (s *Service) DeleteProject(ctx context.Context, projectID string) error {
	err := db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewDelete().Model((*domainRow)(nil)).Where("project_id = ?", projectID).Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewDelete().Model((*claimRow)(nil)).Where("project_id = ?", projectID).Exec(ctx)
		return err
	})
	if err != nil {
		return db.Translate(err)
	}
	s.activeChanged(ctx, projectID)
	return nil
}

// ActiveHostnames are the project's active custom domains (for the DNS step),
// sorted.
func (s *Service) ActiveHostnames(ctx context.Context, projectID string) ([]string, error) {
	var hs []string
	err := s.d.DB.NewSelect().Model((*domainRow)(nil)).Column("hostname").
		Where("project_id = ? AND status = ?", projectID, StatusActive).Order("hostname").Scan(ctx, &hs)
	return hs, db.Translate(err)
}

// ActiveRoutes maps every active custom domain to its project's slug (for
// the ingress's full resync).
func (s *Service) ActiveRoutes(ctx context.Context) (map[string]string, error) {
	var rows []domainRow
	err := s.d.DB.NewSelect().Model(&rows).Column("hostname", "slug").Where("status = ?", StatusActive).Scan(ctx)
	if err != nil {
		return nil, db.Translate(err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Hostname] = r.Slug
	}
	return out, nil
}

// HSTSHostnames are the active custom domains that opted in to HSTS, sorted.
func (s *Service) HSTSHostnames(ctx context.Context) ([]string, error) {
	var hs []string
	err := s.d.DB.NewSelect().Model((*domainRow)(nil)).Column("hostname").
		Where("status = ? AND hsts", StatusActive).Order("hostname").Scan(ctx, &hs)
	return hs, db.Translate(err)
}

// SetCertificate records the state of hostname's certificate (the ingress
// obtained one, expiring at expires, or failed to): certificateStatus and
// certificateExpiresAt of the domain. A hostname that is no domain (an
// apps-domain host) changes nothing.
func (s *Service) SetCertificate(ctx context.Context, hostname, status string, expires *time.Time) error {
	if status != CertificateIssued && status != CertificateError && status != CertificateNone {
		return fmt.Errorf("domains: unknown certificate status %q", status)
	}
	q := s.d.DB.NewUpdate().Model((*domainRow)(nil)).Set("cert_status = ?", status).
		Set("updated_at = ?", s.now()).Where("hostname = ?", hostname)
	if expires != nil || status != CertificateError {
		q = q.Set("cert_expires_at = ?", expires)
	}
	_, err := q.Exec(ctx)
	return db.Translate(err)
}

// ProjectForHost returns the project whose active custom domain host is
// (host as a request names it: any case, a trailing dot or a port are
// ignored); ErrNotFound when it is not an active custom domain.
func (s *Service) ProjectForHost(ctx context.Context, host string) (string, error) {
	h, err := Normalize(host)
	if err != nil {
		return "", platform.NotFound("not a custom domain")
	}
	var id string
	err = s.d.DB.NewSelect().Model((*domainRow)(nil)).Column("project_id").
		Where("hostname = ? AND status = ?", h, StatusActive).Scan(ctx, &id)
	if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
		return "", platform.NotFound("not a custom domain")
	}
	return id, err
}

// ProjectOwnerChanged records the project's new owner account on its
// domains and claims (the project moved to or from a team).
func (s *Service) ProjectOwnerChanged(ctx context.Context, projectID, ownerID string) error {
	return db.Translate(s.d.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for _, m := range []any{(*domainRow)(nil), (*claimRow)(nil)} {
			if _, err := tx.NewUpdate().Model(m).Set("owner_id = ?", ownerID).Where("project_id = ?", projectID).Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	}))
}
