#!/usr/bin/env bash
# Fails on an admitted step or a declared axiom in any proof file, and when the axioms a main
# theorem rests on differ from assumptions.expected or leave the standard classical ones of the
# reals (Coq's classical Dedekind reals, excluded middle, functional extensionality).
set -euo pipefail
cd "$(dirname "$0")"
if grep -nE '\b(Admitted|admit|Axiom|Axioms|Parameter|Parameters|Conjecture)\b' $(grep -v '^-' _CoqProject) Assumptions.v; then
  echo "proofs: an admitted step or a declared axiom (above)" >&2; exit 1
fi
out=$(coqc -Q . Witcert Assumptions.v)
if ! diff -u assumptions.expected <(printf '%s\n' "$out"); then
  echo "proofs: Print Assumptions changed (diff above); update assumptions.expected only for a reviewed reason" >&2
  exit 1
fi
allowed='^(ClassicalDedekindReals\.sig_not_dec|ClassicalDedekindReals\.sig_forall_dec|FunctionalExtensionality\.functional_extensionality_dep|Classical_Prop\.classic)$'
names=$(printf '%s\n' "$out" | grep -E '^[A-Za-z]' | grep -vE '^(Axioms:|Closed under)' | awk '{print $1}' | sort -u)
bad=$(printf '%s\n' "$names" | grep -vE "$allowed" || true)
if [ -n "$bad" ]; then echo "proofs: axioms outside the classical reals: $bad" >&2; exit 1; fi
echo "proofs: $(grep -v '^-' _CoqProject | wc -l) files checked, no admitted step; axioms: $(printf '%s ' $names)"
