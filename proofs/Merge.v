(** The split-KV merge and the block decomposition (docs/certificate.md §5).

    A token is a pair [(ℓ̃_t, c_t)].  The tokens are cut into blocks (splits or pages) in any way:
    the blocks' concatenation is any permutation of the tokens.  Each non-empty block carries
    [lse = ln Σ e^{ℓ̃}] and [λ = ln Σ e^{ℓ̃ + c}]; an empty block carries nothing and is skipped.
    Then LSE-merging the blocks gives [ln A] exactly, and [A − 1 = Σ_j (e^{λ_j − lse} − e^{lse_j − lse})]. *)

From Coq Require Import Reals Lra Lia List Permutation.
From Witcert Require Import Sum EForm.
Import ListNotations.
Open Scope R_scope.

Definition tok := (R * R)%type.
Definition ex (t : tok) : R := exp (fst t).
Definition exc (t : tok) : R := exp (fst t + snd t).

Definition lsum {A} (f : A -> R) (xs : list A) : R := fold_right (fun t acc => f t + acc) 0 xs.

Lemma lsum_app {A} (f : A -> R) xs ys : lsum f (xs ++ ys) = lsum f xs + lsum f ys.
Proof. induction xs; simpl; [lra | rewrite IHxs; lra]. Qed.

Lemma lsum_ext {A} (f g : A -> R) xs : (forall x, f x = g x) -> lsum f xs = lsum g xs.
Proof. intros H. induction xs; simpl; [reflexivity | rewrite IHxs, H; reflexivity]. Qed.

Lemma lsum_minus {A} (f g : A -> R) xs : lsum (fun x => f x - g x) xs = lsum f xs - lsum g xs.
Proof. induction xs; simpl; [lra | rewrite IHxs; lra]. Qed.

Lemma lsum_scal_r {A} (f : A -> R) k xs : lsum (fun x => f x * k) xs = lsum f xs * k.
Proof. induction xs; simpl; [lra | rewrite IHxs; lra]. Qed.

Lemma lsum_perm {A} (f : A -> R) xs ys : Permutation xs ys -> lsum f xs = lsum f ys.
Proof. induction 1; simpl; lra. Qed.

Lemma lsum_concat (f : tok -> R) bs : lsum f (concat bs) = lsum (lsum f) bs.
Proof. induction bs; simpl; [reflexivity | rewrite lsum_app, IHbs; reflexivity]. Qed.

Lemma lsum_exp_pos (f : tok -> R) xs : (forall t, 0 < f t) -> xs <> [] -> 0 < lsum f xs.
Proof.
  intros Hf. induction xs as [|x xs IH]; intros H; [congruence|]. simpl.
  destruct xs as [|y ys]; simpl in *; [specialize (Hf x); lra|].
  assert (0 < lsum f (y :: ys)) by (apply IH; discriminate). specialize (Hf x). simpl in H0. lra.
Qed.

Definition nonempty {A} (b : list A) : bool := match b with [] => false | _ => true end.

(** Skipping the blocks that are empty changes no sum of a quantity that is zero on them. *)
Lemma lsum_skip_empty (g : list tok -> R) bs : g [] = 0 -> lsum g (filter nonempty bs) = lsum g bs.
Proof. intros H. induction bs as [|b bs IH]; [reflexivity|]. destruct b; simpl; rewrite IH; [lra | reflexivity]. Qed.

(** A block's two statistics, and their LSE merge over the non-empty blocks. *)
Definition lse (b : list tok) : R := ln (lsum ex b).
Definition lam (b : list tok) : R := ln (lsum exc b).
Definition merge (stat : list tok -> R) (bs : list (list tok)) : R :=
  ln (lsum (fun b => exp (stat b)) (filter nonempty bs)).

Lemma exp_stat_on_nonempty (f : tok -> R) bs :
  (forall t, 0 < f t) ->
  lsum (fun b => exp (ln (lsum f b))) (filter nonempty bs) = lsum (lsum f) bs.
Proof.
  intros Hf. rewrite <- (lsum_skip_empty (lsum f) bs) by reflexivity.
  induction bs as [|b bs IH]; [reflexivity|].
  destruct b as [|t b]; simpl; [exact IH|].
  rewrite exp_ln by (apply (lsum_exp_pos f (t :: b) Hf); discriminate). simpl in IH. rewrite IH. reflexivity.
Qed.

Definition A_of (toks : list tok) : R := lsum exc toks / lsum ex toks.

Theorem merge_gives_log_A : forall (bs : list (list tok)) (toks : list tok),
  Permutation (concat bs) toks -> toks <> [] ->
  merge lse bs = ln (lsum ex toks) /\
  ln (A_of toks) = merge lam bs - merge lse bs.
Proof.
  intros bs toks Hp Hne.
  assert (Hex : lsum (fun b => exp (lse b)) (filter nonempty bs) = lsum ex toks).
  { unfold lse. rewrite exp_stat_on_nonempty by (intros; apply exp_pos).
    rewrite <- lsum_concat. apply lsum_perm, Hp. }
  assert (Hexc : lsum (fun b => exp (lam b)) (filter nonempty bs) = lsum exc toks).
  { unfold lam. rewrite exp_stat_on_nonempty by (intros; apply exp_pos).
    rewrite <- lsum_concat. apply lsum_perm, Hp. }
  unfold merge. rewrite Hex, Hexc. split; [reflexivity|].
  unfold A_of, Rdiv.
  assert (H1 : 0 < lsum exc toks) by (apply lsum_exp_pos; [intros; apply exp_pos | exact Hne]).
  assert (H2 : 0 < lsum ex toks) by (apply lsum_exp_pos; [intros; apply exp_pos | exact Hne]).
  rewrite ln_mult, ln_Rinv by (try apply Rinv_0_lt_compat; assumption). ring.
Qed.

(** The block decomposition the gate ranks pages by. *)
Theorem a_minus_one_by_blocks : forall (bs : list (list tok)) (toks : list tok),
  Permutation (concat bs) toks -> toks <> [] ->
  A_of toks - 1 =
  lsum (fun b => exp (lam b - ln (lsum ex toks)) - exp (lse b - ln (lsum ex toks))) (filter nonempty bs).
Proof.
  intros bs toks Hp Hne.
  assert (HS : 0 < lsum ex toks) by (apply lsum_exp_pos; [intros; apply exp_pos | exact Hne]).
  assert (Hd : forall v, exp (v - ln (lsum ex toks)) = exp v * / lsum ex toks).
  { intros v. unfold Rminus. rewrite exp_plus, exp_Ropp, exp_ln by exact HS. reflexivity. }
  rewrite (lsum_ext _ (fun b => exp (lam b) * / lsum ex toks - exp (lse b) * / lsum ex toks))
    by (intros; rewrite !Hd; reflexivity).
  rewrite lsum_minus, !lsum_scal_r.
  destruct (merge_gives_log_A bs toks Hp Hne) as [_ _].
  unfold lse, lam. rewrite !exp_stat_on_nonempty by (intros; apply exp_pos).
  rewrite <- !lsum_concat, !(lsum_perm _ _ _ Hp).
  unfold A_of. field. lra.
Qed.

(** The same [A] as the e-form's, for tokens [0 .. n−1]. *)
Lemma lsum_seq (f : nat -> R) k n : lsum f (seq k n) = sumn n (fun i => f (k + i)%nat).
Proof.
  revert k. induction n as [|n IH]; intros k; [reflexivity|].
  cbn [seq lsum fold_right]. fold (lsum f (seq (S k) n)). rewrite IH.
  rewrite (sumn_add 1 n). cbn [sumn]. rewrite Nat.add_0_r.
  rewrite (sumn_ext n (fun i => f (S k + i)%nat) (fun k0 => f (k + (1 + k0))%nat)) by (intros; f_equal; lia).
  lra.
Qed.

Theorem A_of_is_eform_A : forall n (lt c : nat -> R), (0 < n)%nat ->
  A_of (map (fun i => (lt i, c i)) (seq 0 n)) = eform_A n lt c.
Proof.
  intros n lt c Hn. rewrite eform_A_ratio by exact Hn. unfold A_of.
  assert (Hm : forall (f : tok -> R) xs, lsum f (map (fun i => (lt i, c i)) xs) = lsum (fun i => f (lt i, c i)) xs)
    by (intros f xs; induction xs; simpl; [reflexivity | rewrite IHxs; reflexivity]).
  rewrite !Hm, !lsum_seq. reflexivity.
Qed.
