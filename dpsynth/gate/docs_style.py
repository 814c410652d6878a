"""The stylesheet that makes GE's Data Docs look right offline.

GE writes its pages for Bootstrap 4, Bootstrap Table and Font Awesome fetched from
public CDNs; the gate strips every remote asset (:mod:`dpsynth.gate.docs`), so the
pages would render as bare HTML. This stylesheet, written for the classes GE's
templates use (grid, cards, tables, badges, alerts, navigation, spacing utilities),
stands in for them: a two-column page with a sticky contents sidebar, tables with
rules, the status icons as coloured marks, and nothing that needs JavaScript (the
"show more" blocks are open, the walkthrough modal and the JS-only filter are hidden).
It is inserted into each page's ``<head>``, after GE's own local styles.
"""

from __future__ import annotations

__all__ = ["OFFLINE_CSS"]

OFFLINE_CSS = """
*, *::before, *::after { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328;
       background: #f6f8fa; }
a { color: #0b5cad; text-decoration: none; } a:hover { text-decoration: underline; }
h4 { font-size: 1.2rem; margin: 0 0 .3rem; } h5 { font-size: 1.05rem; } h6, .h6 { font-size: .9rem; font-weight: 600; }
.lead { color: #57606a; margin: 0 0 .6rem; }
.navbar { display: flex; align-items: center; background: #fff; padding: 0 1.5rem; }
nav.navbar.sticky-top { position: sticky; top: 0; z-index: 10; height: 52px !important; }
.border-bottom { border-bottom: 1px solid #d0d7de; }
.navbar-brand { display: none; }
.breadcrumb { display: flex; flex-wrap: wrap; list-style: none; margin: 0; padding: .4rem .8rem; border-radius: 6px;
              background: #eef1f4; }
.breadcrumb-item + .breadcrumb-item::before { content: "/"; padding: 0 .5rem; color: #8c959f; }
.breadcrumb-item.active { color: #57606a; }
.container-fluid { width: 100%; padding: 1.2rem 1.5rem; }
.ge-section.container-fluid { padding: 0; margin-bottom: 1rem; background: #fff; border: 1px solid #d0d7de;
                              border-radius: 8px; overflow: hidden; }
.row { display: flex; flex-wrap: wrap; align-items: flex-start; gap: 0; }
.col-12, .col-xs-12, .col-sm-12 { flex: 0 0 100%; max-width: 100%; }
.col-6 { flex: 0 0 50%; max-width: 50%; }
@media (min-width: 768px) {
  .col-md-2, .col-lg-2 { flex: 0 0 17rem; max-width: 17rem; padding-right: 1.2rem; }
  .col-md-10, .col-lg-10 { flex: 1 1 0; max-width: calc(100% - 17rem); }
  .sticky { position: sticky; top: 64px; }
  .col-md-4 { flex: 0 0 33.3%; max-width: 33.3%; } .col-md-6 { flex: 0 0 50%; max-width: 50%; }
  .col-md-8 { flex: 0 0 66.6%; max-width: 66.6%; }
}
.card { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; margin-bottom: 1rem; overflow: hidden; }
.card-header { background: #f6f8fa; border-bottom: 1px solid #d0d7de; padding: .5rem .8rem; }
.card-body { padding: .6rem .8rem; }
.alert { margin: 0; padding: .6rem 1rem; }
.alert-secondary { background: #eef1f4; border-bottom: 1px solid #d0d7de; }
.alert-secondary h5 { margin: 0; }
.table-responsive { overflow-x: auto; }
table, .table { width: 100%; border-collapse: collapse; margin: .4rem 0; background: #fff; }
.col-6 .table { width: auto; }
th, td { text-align: left; vertical-align: top; padding: .4rem .7rem; border-bottom: 1px solid #eaeef2; }
thead th { border-bottom: 2px solid #d0d7de; font-weight: 600; color: #57606a; }
.table-sm th, .table-sm td { padding: .25rem .6rem; }
tbody tr:hover { background: #f6f8fa; }
.badge { display: inline-block; padding: .05rem .4rem; margin: .05rem 0; font-size: .8rem; border-radius: 4px;
         font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.badge-secondary { background: #eef1f4; border: 1px solid #d0d7de; color: #24292f; }
.nav { list-style: none; margin: 0; padding: 0; }
.nav-link { display: block; padding: .2rem .6rem; border-radius: 4px; color: #24292f; }
.nav-link:hover { background: #eef1f4; text-decoration: none; }
.ge-navigation-sidebar-container { display: block; overflow: auto; }
.btn { display: inline-block; padding: .25rem .7rem; border-radius: 6px; border: 1px solid #d0d7de; }
.btn-primary { background: #0b5cad; border-color: #0b5cad; color: #fff; }
.bg-light { background: #f6f8fa; }
.text-success { color: #1a7f37; } .text-danger { color: #c62828; } .text-muted { color: #57606a; }
i.fas { font-style: normal; font-weight: bold; }
.fa-check-circle::before { content: "\\2714"; color: #1a7f37; }
.fa-times::before, .fa-times-circle::before { content: "\\2718"; color: #c62828; }
.fa-question-circle::before { content: "?"; }
.collapse { display: block; }
.cooltip .top, .tooltip, .modal, .modal-backdrop, .btn-group-toggle, .ge-walkthrough-modal { display: none !important; }
.card:has(.btn-group-toggle), .ge-index-page-tabs-container { display: none; }
.d-flex { display: flex; } .align-items-center { align-items: center; } .justify-content-center { justify-content: center; }
.d-none { display: none; }
@media (min-width: 768px) { .d-md-block { display: block !important; } .d-md-inline-flex { display: inline-flex !important; } }
.float-left { float: left; }
.rounded { border-radius: 6px; }
.m-0 { margin: 0 !important; } .m-2 { margin: .5rem; } .mb-0 { margin-bottom: 0 !important; } .mt-0 { margin-top: 0 !important; }
.mb-1 { margin-bottom: .25rem; } .mt-1 { margin-top: .25rem; } .mb-2 { margin-bottom: .5rem; } .mb-3 { margin-bottom: 1rem; }
.mb-4 { margin-bottom: 1.2rem; } .ml-1 { margin-left: .25rem; } .ml-2 { margin-left: .5rem; } .mr-2 { margin-right: .5rem; }
.p-0 { padding: 0 !important; } .p-1 { padding: .25rem; } .p-2 { padding: .5rem; } .p-3 { padding: .8rem; }
.px-0 { padding-left: 0; padding-right: 0; } .pl-sm-3 { padding-left: 0; }
.show-scrollbars { overflow-x: auto; }
.dpsynth-pages { margin: 1rem 1.5rem; padding: .6rem 1rem; background: #fff; border: 1px solid #d0d7de;
                 border-radius: 8px; }
.dpsynth-pages h2 { font-size: 1.05rem; margin: .2rem 0 .4rem; }
"""
