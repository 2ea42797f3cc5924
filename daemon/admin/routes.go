package admin

import "net/http"

// route is one API route; the same table registers the mux and is checked
// against openapi.yaml.
type route struct {
	method, path string
	scope        Scope // "" = public (no data)
	h            http.HandlerFunc
}

func (s *Server) routes() []route {
	return []route{
		{"GET", "/api/v1/status", ScopeRead, s.getStatus},
		{"GET", "/api/v1/instances", ScopeRead, s.getInstances},
		{"GET", "/api/v1/leaders", ScopeRead, s.getLeaders},
		{"POST", "/api/v1/leaders/{role}/resign", ScopeAdmin, s.postResign},
		{"GET", "/api/v1/locks", ScopeRead, s.getLocks},
		{"GET", "/api/v1/jobs", ScopeRead, s.getJobs},
		{"GET", "/api/v1/jobs/{job}", ScopeRead, s.getJob},
		{"POST", "/api/v1/jobs/{job}/trigger", ScopeAdmin, s.postTrigger},
		{"POST", "/api/v1/jobs/{job}/pause", ScopeAdmin, s.postPause},
		{"POST", "/api/v1/jobs/{job}/resume", ScopeAdmin, s.postResume},
		{"GET", "/api/v1/jobs/{job}/instants", ScopeRead, s.getJobInstants},
		{"GET", "/api/v1/runs", ScopeRead, s.getRuns},
		{"GET", "/api/v1/runs/{job}/{at}", ScopeRead, s.getRun},
		{"GET", ProofPath, "", s.getProof},
		{"GET", "/openapi.yaml", "", s.getOpenAPI},
		{"GET", "/{$}", "", s.getDashboardFile("index.html")},
		{"GET", "/dashboard/app.js", "", s.getDashboardFile("app.js")},
		{"GET", "/dashboard/style.css", "", s.getDashboardFile("style.css")},
		{"GET", "/dashboard/runs.js", "", s.getDashboardFile("runs.js")},
		{"GET", "/dashboard/axis.js", "", s.getDashboardFile("axis.js")},
	}
}
