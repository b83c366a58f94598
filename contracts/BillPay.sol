// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {MessageHashUtils} from "@openzeppelin/contracts/utils/cryptography/MessageHashUtils.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {ISignatureTransfer} from "@uniswap/v4-periphery/lib/permit2/src/interfaces/ISignatureTransfer.sol";

/// @dev The EIP-3009 views BillPay needs to check an x402 payment before refunding it.
interface IEIP3009 {
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() external view returns (bytes32);
}

/// @title BillPay
/// @notice The bill-payment service's treasury on one chain. Every inbound payment lands here:
///         agent-hub payments are pulled by the operator from a payer's own spending allowance,
///         and x402 payments arrive as EIP-3009 transfers naming this contract as `payTo`, or
///         (for tokens without EIP-3009) as Permit2 witness transfers through the x402 exact
///         Permit2 proxy naming this contract as the witness's `to`.
///         Refunds of failed bills leave from here, and only to the original payer.
/// @dev    Money leaves this contract in exactly four ways, and the chain bounds each:
///         - `refund`: a pulled order back to its payer; at most what was pulled, once per
///           order; REFUNDER_ROLE; within the token's refund budget; stopped by pause. It
///           gives back the spending allowance the pull used, unless the payer has set a
///           new allowance since, and what it used of the payer's current period.
///         - `refundAuthorization`: an x402 order back to its payer; at most the value of an
///           authorization the payer signed to this contract whose nonce is consumed, once
///           per (token, payer, nonce) and per order id; REFUNDER_ROLE; within the refund
///           budget; stopped by pause. The chain cannot tell whether the nonce was consumed
///           by a payment to this contract or cancelled, nor how much that payment was: the
///           token moved it without calling here. The service checks that against the
///           ledger before it refunds, and `npm run audit` checks every refund afterwards.
///           The budget is what bounds a leaked refunder key on chain.
///         - `refundPermit2`: an x402 order paid through Permit2 back to its payer; at most the
///           amount of a PermitWitnessTransferFrom the payer signed to the canonical x402
///           exact proxy with this contract as the witness's `to`, whose Permit2 nonce is
///           used, once per (payer, nonce) and per order id; REFUNDER_ROLE; within the
///           refund budget; stopped by pause. As for `refundAuthorization`, the chain cannot
///           tell whether the nonce was used by that payment to this contract or by another
///           permit of the payer's under the same nonce (to another spender, or for a smaller
///           amount), or invalidated by the payer (invalidateUnorderedNonces), nor how much
///           arrived: Permit2 moved the funds without calling here. The service refunds only
///           what the ledger shows arrived under the nonce, `npm run audit` checks every
///           refund afterwards, and the budget bounds a leaked refunder key meanwhile.
///         - `withdraw`: DEFAULT_ADMIN_ROLE only (a multisig in production).
///         Money enters by `pull`/`pullBatch` only from a payer that set a spending allowance,
///         within it and its own periodic limit, and within the token's pull budget.
///         Roles: DEFAULT_ADMIN_ROLE manages roles, the accept-list, refund and pull budgets
///         and withdrawals; OPERATOR_ROLE (a hot key) pulls; REFUNDER_ROLE (a hot key)
///         refunds; PAUSER_ROLE (the guardian) stops pulls and refunds. Payers can always
///         revoke, paused or not.
///         A leaked operator key can pull at most the token's pull budget per period, only
///         from payers that set a spending allowance (and within it), and only into BillPay:
///         it can never move money out of BillPay, and a refund does not give the budget back.
contract BillPay is AccessControl, Pausable, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    bytes32 public constant OPERATOR_ROLE = keccak256("OPERATOR_ROLE");
    bytes32 public constant REFUNDER_ROLE = keccak256("REFUNDER_ROLE");
    bytes32 public constant PAUSER_ROLE = keccak256("PAUSER_ROLE");

    bytes32 private constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    /// @notice Uniswap's Permit2: the same address on every EVM chain.
    address public constant PERMIT2 = 0x000000000022D473030F116dDEE9F6B43aC78BA3;
    /// @notice The x402 exact Permit2 proxy, the spender an x402 payer names in its Permit2
    ///         signature: the same address on every EVM chain (CREATE2).
    address public constant X402_EXACT_PERMIT2_PROXY = 0x402085c248EeA27D92E8b30b2C58ed07f9E20001;

    bytes32 private constant TOKEN_PERMISSIONS_TYPEHASH = keccak256("TokenPermissions(address token,uint256 amount)");
    bytes32 private constant PERMIT2_WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");
    bytes32 private constant PERMIT_WITNESS_TRANSFER_FROM_TYPEHASH = keccak256(
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)"
        "TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)"
    );

    /// @notice An EIP-3009 TransferWithAuthorization as the payer signed it (the x402 payload).
    struct Authorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
        bytes signature;
    }

    /// @notice An x402 Permit2 payment as the payer signed it (the x402 `permit2` payload):
    ///         the PermitWitnessTransferFrom's permitted token and amount, nonce and deadline,
    ///         its witness {to, validAfter}, the payer (`owner`) and its signature. The spender
    ///         is always X402_EXACT_PERMIT2_PROXY.
    struct Permit2Payment {
        address token;
        uint256 amount;
        uint256 nonce;
        uint256 deadline;
        address owner;
        address to;
        uint256 validAfter;
        bytes signature;
    }

    /// @notice One item of a batch pull.
    struct PullRequest {
        bytes32 orderId;
        address payer;
        address token;
        uint256 amount;
    }

    /// @notice What the chain knows of an order id. Packed in two storage slots.
    /// @dev    `paid` is the pulled amount for agent-hub orders and 0 for x402 orders, whose
    ///         value the contract never sees (the token moves funds without calling BillPay).
    ///         `pulledAt` is the block of the pull (0 for x402 orders).
    struct Order {
        address payer;
        uint96 paid;
        address token;
        bool refunded;
        uint64 pulledAt;
    }

    /// @notice A token's budget, for refunds or for pulls: a bucket of `limit` that refills
    ///         at `limit` per `period` seconds. What draws on it reverts beyond what it holds,
    ///         so over any span of T seconds at most `limit + limit * T / period` goes.
    ///         Refunds draw on the refund budget; every pull, by any payer, on the pull budget,
    ///         which a refund does not refill (else a pull and its refund could be looped to
    ///         pull without bound).
    struct Budget {
        uint96 limit;
        uint32 period;
        uint96 available;
        uint32 updatedAt;
    }

    /// @notice A payer's own cap on what may be pulled from it in one token per period, on top
    ///         of the spending allowance (as Coinbase's SpendPermissionManager and ERC-7715's
    ///         erc20-token-periodic do). Periods are fixed windows of `period` seconds from
    ///         `start`; the tally starts again at zero in each. Packed in two storage slots.
    struct SpendingLimit {
        uint128 amountPerPeriod;
        /// Pulled in period number `spentPeriod`, less the refunds of those pulls.
        uint128 spent;
        /// Seconds; 0 means no periodic limit.
        uint40 period;
        uint40 start;
        uint40 spentPeriod;
        /// Pulls from this block on are counted in `spent` (a refund gives back only those).
        uint64 spentSinceBlock;
    }

    /// @notice payer => token => the most the operator may still pull, in raw token units.
    mapping(address payer => mapping(address token => uint256 amount)) public spendingAllowance;

    /// @notice Tokens that may be pulled or have a spending allowance set.
    mapping(address token => bool accepted) public isAcceptedToken;

    /// @notice keccak256(abi.encode(token, payer, nonce)) => an x402 payment already refunded.
    mapping(bytes32 authorizationKey => bool refunded) public authorizationRefunded;

    /// @notice keccak256(abi.encode(owner, nonce)) => an x402 Permit2 payment already refunded.
    ///         Permit2 nonces are per owner across all tokens, so the token is not in the key.
    mapping(bytes32 permit2Key => bool refunded) public permit2Refunded;

    /// @notice payer => token => the block in which the payer last set its spending allowance.
    ///         A refund restores the allowance only of a pull made in a later block.
    mapping(address payer => mapping(address token => uint256 blockNumber)) public spendingAllowanceSetAt;

    mapping(bytes32 orderId => Order) private _orders;
    mapping(address payer => mapping(address token => SpendingLimit)) private _spendingLimits;
    mapping(address token => Budget) private _refundBudgets;
    mapping(address token => Budget) private _pullBudgets;

    /// @notice A payer set the most the operator may pull from it in `token` from now on.
    event SpendingAllowanceSet(address indexed payer, address indexed token, uint256 amount);
    /// @notice A payer set (or, with `period` 0, removed) its per-period limit in `token`. The
    ///         first period starts at `start`, with `spent` already counted: what was pulled in
    ///         the current period of the limit it replaces, so changing a limit never frees
    ///         what the period had already used.
    event SpendingLimitSet(
        address indexed payer, address indexed token, uint256 amountPerPeriod, uint256 period, uint256 start, uint256 spent
    );
    /// @notice A pull, or the refund of one, changed what a payer's period has used: `spent`
    ///         in the period that began at `periodStart`.
    event SpendingLimitUsed(address indexed payer, address indexed token, uint256 periodStart, uint256 spent);
    /// @notice An agent-hub payment: `amount` moved from `payer` into this contract.
    event Pulled(
        bytes32 indexed orderId, address indexed payer, address indexed token, uint256 amount, uint256 allowanceLeft
    );
    /// @notice A refund to the order's payer. `authorizationNonce` is the refunded x402
    ///         payment's EIP-3009 nonce, or zero for a refund of a pulled order.
    event Refunded(
        bytes32 indexed orderId, address indexed payer, address indexed token, uint256 amount, bytes32 authorizationNonce
    );
    /// @notice A refund of an x402 payment made through Permit2 to its payer (`owner` of the
    ///         permit): `nonce` is the refunded payment's Permit2 nonce.
    event Permit2Refunded(
        bytes32 indexed orderId, address indexed payer, address indexed token, uint256 amount, uint256 nonce
    );
    /// @notice A refunded pull gave back the spending allowance it used: `amount` was added,
    ///         leaving `allowanceLeft`.
    event SpendingAllowanceRestored(
        bytes32 indexed orderId, address indexed payer, address indexed token, uint256 amount, uint256 allowanceLeft
    );
    /// @notice The admin set a token's refund budget.
    event RefundBudgetSet(address indexed token, uint256 limit, uint256 period);
    /// @notice The admin set a token's pull budget.
    event PullBudgetSet(address indexed token, uint256 limit, uint256 period);
    /// @notice The admin moved treasury funds out.
    event Withdrawn(address indexed token, address indexed to, uint256 amount);
    /// @notice The admin added a token to, or removed it from, the accept-list.
    event TokenAcceptanceSet(address indexed token, bool accepted);

    error ZeroAddress();
    error ZeroAmount();
    error EmptyBatch();
    error TokenNotAccepted(address token);
    error OrderExists(bytes32 orderId);
    error UnknownOrder(bytes32 orderId);
    error AlreadyRefunded(bytes32 orderId);
    error SpendingAllowanceExceeded(address payer, address token, uint256 requested, uint256 available);
    error RefundExceedsPayment(bytes32 orderId, uint256 requested, uint256 paid);
    error AuthorizationAlreadyRefunded(address token, address payer, bytes32 nonce);
    error AuthorizationNotUsed(address token, address payer, bytes32 nonce);
    error NotAnAuthorizationToken(address token);
    error AuthorizationNotToThisContract(address to);
    error InvalidAuthorizationSignature();
    error Permit2AlreadyRefunded(address owner, uint256 nonce);
    error Permit2NonceNotUsed(address owner, uint256 nonce);
    error InvalidPermit2Signature();
    error Permit2Missing();
    error ZeroNonce();
    error InvalidRefundPeriod(uint256 period);
    error InvalidSpendingPeriod(uint256 period);
    error SpendingLimitExceeded(address payer, address token, uint256 requested, uint256 available, uint256 periodEnds);
    error RefundBudgetExceeded(address token, uint256 requested, uint256 available);
    error InvalidPullPeriod(uint256 period);
    error PullBudgetExceeded(address token, uint256 requested, uint256 available);

    /// @param admin    holds DEFAULT_ADMIN_ROLE (roles, accept-list, refund and pull budgets, withdrawals)
    /// @param operator holds OPERATOR_ROLE (pulls); may be zero and granted later
    /// @param refunder holds REFUNDER_ROLE (refunds); may be zero and granted later
    /// @param pauser   holds PAUSER_ROLE; may be zero and granted later
    /// @param tokens   the initial accept-list. Refund and pull budgets start at zero: the admin
    ///                 sets them, and until then no token can be refunded or pulled.
    constructor(address admin, address operator, address refunder, address pauser, address[] memory tokens) {
        if (admin == address(0)) revert ZeroAddress();
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        if (operator != address(0)) _grantRole(OPERATOR_ROLE, operator);
        if (refunder != address(0)) _grantRole(REFUNDER_ROLE, refunder);
        if (pauser != address(0)) _grantRole(PAUSER_ROLE, pauser);
        for (uint256 i = 0; i < tokens.length; ++i) {
            _setTokenAccepted(tokens[i], true);
        }
    }

    // ---------------------------------------------------------------- payers

    /// @notice Set the most the operator may pull from the caller in `token` from now on, in
    ///         raw token units. It replaces the previous figure; 0 revokes. Revoking works for
    ///         any token and even while the contract is paused. The token's own ERC-20
    ///         `approve` of this contract is needed as well: this figure only narrows it.
    ///         A refund of an earlier pull does not add to a figure set after that pull.
    function setSpendingAllowance(address token, uint256 amount) external {
        if (amount != 0 && !isAcceptedToken[token]) revert TokenNotAccepted(token);
        spendingAllowance[msg.sender][token] = amount;
        spendingAllowanceSetAt[msg.sender][token] = block.number;
        emit SpendingAllowanceSet(msg.sender, token, amount);
    }

    /// @notice Cap what the operator may pull from the caller in `token` to `amountPerPeriod`
    ///         per `periodSeconds`, in fixed periods starting now. Both this and the spending
    ///         allowance apply to every pull. What the current period of a previous limit has
    ///         used counts against the first period of the new one. `periodSeconds` 0 (with
    ///         `amountPerPeriod` 0) removes the limit; removing works for any token, paused or not.
    function setSpendingLimit(address token, uint256 amountPerPeriod, uint256 periodSeconds) external {
        if (periodSeconds == 0) {
            if (amountPerPeriod != 0) revert InvalidSpendingPeriod(0);
            delete _spendingLimits[msg.sender][token];
            emit SpendingLimitSet(msg.sender, token, 0, 0, 0, 0);
            return;
        }
        if (periodSeconds > type(uint40).max) revert InvalidSpendingPeriod(periodSeconds);
        if (!isAcceptedToken[token]) revert TokenNotAccepted(token);
        SpendingLimit storage l = _spendingLimits[msg.sender][token];
        uint256 carried;
        uint64 since = uint64(block.number + 1);
        if (l.period != 0 && (block.timestamp - l.start) / l.period == l.spentPeriod) {
            carried = l.spent;
            since = l.spentSinceBlock;
        }
        _spendingLimits[msg.sender][token] = SpendingLimit({
            amountPerPeriod: SafeCast.toUint128(amountPerPeriod),
            spent: uint128(carried),
            period: uint40(periodSeconds),
            start: uint40(block.timestamp),
            spentPeriod: 0,
            spentSinceBlock: since
        });
        emit SpendingLimitSet(msg.sender, token, amountPerPeriod, periodSeconds, block.timestamp, carried);
    }

    // ---------------------------------------------------------- pulls (operator)

    /// @notice Pull `amount` of `token` from `payer` into this contract for `orderId`, within
    ///         the payer's spending allowance and periodic limit and the token's pull budget.
    /// @dev    The payer's spending allowance is decremented before the transfer; each order
    ///         id is accepted once ever, whether pulled or refunded as an x402 order.
    /// @return allowanceLeft the payer's spending allowance left after this pull
    function pull(bytes32 orderId, address payer, address token, uint256 amount)
        external
        onlyRole(OPERATOR_ROLE)
        whenNotPaused
        nonReentrant
        returns (uint256 allowanceLeft)
    {
        return _pull(orderId, payer, token, amount);
    }

    /// @notice Many pulls in one transaction, each under the same rules as `pull` and each
    ///         drawing on the token's pull budget. All or nothing: one failing item reverts the
    ///         batch, so the caller checks allowances, budgets and balances first.
    function pullBatch(PullRequest[] calldata requests) external onlyRole(OPERATOR_ROLE) whenNotPaused nonReentrant {
        uint256 n = requests.length;
        if (n == 0) revert EmptyBatch();
        for (uint256 i = 0; i < n; ++i) {
            PullRequest calldata r = requests[i];
            _pull(r.orderId, r.payer, r.token, r.amount);
        }
    }

    // ------------------------------------------------------- refunds (refunder)

    /// @notice Refund a pulled order to its payer: at most the pulled amount, once, within the
    ///         token's refund budget. The spending allowance the pull used is given back (a
    ///         refunded bill was never delivered), unless the payer set a new allowance after
    ///         the pull (in that block or later): that figure is the payer's word from then on.
    ///         The token's pull budget is not given back.
    function refund(bytes32 orderId, uint256 amount) external onlyRole(REFUNDER_ROLE) whenNotPaused nonReentrant {
        Order storage order = _orders[orderId];
        address payer = order.payer;
        if (payer == address(0)) revert UnknownOrder(orderId);
        if (order.refunded) revert AlreadyRefunded(orderId);
        if (amount == 0) revert ZeroAmount();
        if (amount > order.paid) revert RefundExceedsPayment(orderId, amount, order.paid);

        order.refunded = true;
        address token = order.token;
        _spendRefundBudget(token, amount);
        emit Refunded(orderId, payer, token, amount, bytes32(0));
        _restoreSpendingLimit(payer, token, order.pulledAt, amount);
        if (spendingAllowanceSetAt[payer][token] < order.pulledAt) {
            uint256 left = spendingAllowance[payer][token];
            // Saturating: an "unlimited" allowance stays unlimited instead of reverting.
            left = left > type(uint256).max - amount ? type(uint256).max : left + amount;
            spendingAllowance[payer][token] = left;
            emit SpendingAllowanceRestored(orderId, payer, token, amount, left);
        }
        IERC20(token).safeTransfer(payer, amount);
    }

    /// @notice Refund an order paid by x402 to its payer: the payer's signed EIP-3009
    ///         authorization (the x402 payload) is presented, and at most its value goes back.
    /// @dev    What the chain enforces here: REFUNDER_ROLE; not paused; that `auth` is a
    ///         TransferWithAuthorization signed by `auth.from` for `token` (its own EIP-712
    ///         domain), naming this contract as payee, with a non-zero nonce (zero marks a
    ///         pull's refund in `Refunded`); that its nonce has been consumed
    ///         (authorizationState is true); `amount` <= `auth.value`; one refund per
    ///         (token, payer, nonce) and per order id; the token's refund budget; the money
    ///         goes only to the payer.
    ///         What the chain cannot enforce: that the nonce was consumed by a transfer to this
    ///         contract rather than cancelled or spent on another authorization under the same
    ///         nonce, nor the amount that transfer carried, because the token moved the funds
    ///         without calling BillPay. A payer can sign two authorizations under one nonce and
    ///         have the small one land; a refunder key can sign one from its own wallet and
    ///         cancel it. So the service refunds only what the ledger shows arrived under the
    ///         nonce (an AuthorizationUsed immediately followed by its Transfer payer ->
    ///         BillPay), `npm run audit` matches every refund to such a payment, and the
    ///         refund budget caps what a leaked refunder key can take meanwhile.
    function refundAuthorization(bytes32 orderId, address token, Authorization calldata auth, uint256 amount)
        external
        onlyRole(REFUNDER_ROLE)
        whenNotPaused
        nonReentrant
    {
        address payer = auth.from;
        if (payer == address(0)) revert ZeroAddress();
        if (amount == 0) revert ZeroAmount();
        if (auth.nonce == bytes32(0)) revert ZeroNonce();
        if (auth.to != address(this)) revert AuthorizationNotToThisContract(auth.to);
        if (amount > auth.value) revert RefundExceedsPayment(orderId, amount, auth.value);
        if (_orders[orderId].payer != address(0)) revert OrderExists(orderId);
        bytes32 key = keccak256(abi.encode(token, payer, auth.nonce));
        if (authorizationRefunded[key]) revert AuthorizationAlreadyRefunded(token, payer, auth.nonce);
        _requireSignedAndUsed(token, auth);

        authorizationRefunded[key] = true;
        _orders[orderId] = Order({payer: payer, paid: 0, token: token, refunded: true, pulledAt: 0});
        _spendRefundBudget(token, amount);
        emit Refunded(orderId, payer, token, amount, auth.nonce);
        IERC20(token).safeTransfer(payer, amount);
    }

    /// @notice Refund an order paid by x402 through Permit2 to its payer: the payer's signed
    ///         PermitWitnessTransferFrom (the x402 `permit2` payload) is presented, and at most
    ///         its amount goes back.
    /// @dev    What the chain enforces here: REFUNDER_ROLE; not paused; that `p` is a
    ///         PermitWitnessTransferFrom signed by `p.owner` (an EOA, or an ERC-1271 wallet)
    ///         under Permit2's own domain (its DOMAIN_SEPARATOR()), with the x402 exact proxy as
    ///         spender and the witness {to, validAfter}, naming this contract as `to`; that its
    ///         nonce is used in Permit2 (the bit is set in nonceBitmap); `amount` <= `p.amount`;
    ///         one refund per (owner, nonce) (Permit2 nonces are per owner across all tokens)
    ///         and per order id; `p.token`'s refund budget; the money goes only to the payer.
    ///         What the chain cannot enforce: that the nonce was used by this payment to this
    ///         contract rather than by another permit the payer signed under the same nonce
    ///         (to another spender, or for a smaller amount) or invalidated with
    ///         invalidateUnorderedNonces, nor the amount that arrived, because Permit2 moved the
    ///         funds without calling BillPay. A refunder key could sign such a permit from its
    ///         own wallet and spend its nonce elsewhere. So the service refunds only what the
    ///         ledger shows arrived under the nonce (the token's Transfer payer -> BillPay
    ///         immediately followed by the proxy's Settled), `npm run audit` matches every
    ///         refund to such a payment, and the refund budget caps what a leaked refunder
    ///         key can take meanwhile.
    function refundPermit2(bytes32 orderId, Permit2Payment calldata p, uint256 amount)
        external
        onlyRole(REFUNDER_ROLE)
        whenNotPaused
        nonReentrant
    {
        address payer = p.owner;
        if (payer == address(0)) revert ZeroAddress();
        if (amount == 0) revert ZeroAmount();
        if (p.to != address(this)) revert AuthorizationNotToThisContract(p.to);
        if (amount > p.amount) revert RefundExceedsPayment(orderId, amount, p.amount);
        if (_orders[orderId].payer != address(0)) revert OrderExists(orderId);
        bytes32 key = keccak256(abi.encode(payer, p.nonce));
        if (permit2Refunded[key]) revert Permit2AlreadyRefunded(payer, p.nonce);
        _requirePermit2SignedAndUsed(p);

        permit2Refunded[key] = true;
        address token = p.token;
        _orders[orderId] = Order({payer: payer, paid: 0, token: token, refunded: true, pulledAt: 0});
        _spendRefundBudget(token, amount);
        emit Permit2Refunded(orderId, payer, token, amount, p.nonce);
        IERC20(token).safeTransfer(payer, amount);
    }

    // ----------------------------------------------------------------- admin

    /// @notice Move treasury funds out (settled revenue to the biller float, say).
    function withdraw(address token, address to, uint256 amount) external onlyRole(DEFAULT_ADMIN_ROLE) nonReentrant {
        if (to == address(0)) revert ZeroAddress();
        if (amount == 0) revert ZeroAmount();
        emit Withdrawn(token, to, amount);
        IERC20(token).safeTransfer(to, amount);
    }

    function setTokenAccepted(address token, bool accepted) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setTokenAccepted(token, accepted);
    }

    /// @notice Set how much of `token` may be refunded: up to `limit` at once, refilled at
    ///         `limit` per `period` seconds. A token whose budget was never set starts full;
    ///         otherwise what is available now is kept, capped at the new limit. A limit of 0
    ///         stops refunds in that token.
    function setRefundBudget(address token, uint256 limit, uint256 period) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (period == 0 || period > type(uint32).max) revert InvalidRefundPeriod(period);
        _setBudget(_refundBudgets[token], limit, period);
        emit RefundBudgetSet(token, limit, period);
    }

    /// @notice Set how much of `token` the operator may pull, from all payers together: up to
    ///         `limit` at once, refilled at `limit` per `period` seconds. A token whose budget
    ///         was never set allows no pull; once set, it starts full; after that what is
    ///         available now is kept, capped at the new limit. A limit of 0 stops pulls in that
    ///         token.
    function setPullBudget(address token, uint256 limit, uint256 period) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (period == 0 || period > type(uint32).max) revert InvalidPullPeriod(period);
        _setBudget(_pullBudgets[token], limit, period);
        emit PullBudgetSet(token, limit, period);
    }

    /// @notice Pauses pulls and refunds. Revoking a spending allowance still works.
    function pause() external onlyRole(PAUSER_ROLE) {
        _pause();
    }

    function unpause() external onlyRole(PAUSER_ROLE) {
        _unpause();
    }

    // ----------------------------------------------------------------- views

    /// @notice What the chain knows of `orderId` (all zero when it has never been used).
    function orderOf(bytes32 orderId) external view returns (Order memory) {
        return _orders[orderId];
    }

    /// @notice A payer's periodic limit in `token`: the current period's start and what it has
    ///         used, and what may still be pulled in it (type(uint256).max when there is no limit).
    function spendingLimit(address payer, address token)
        external
        view
        returns (uint256 amountPerPeriod, uint256 period, uint256 periodStart, uint256 spent, uint256 available)
    {
        SpendingLimit storage l = _spendingLimits[payer][token];
        if (l.period == 0) return (0, 0, 0, 0, type(uint256).max);
        uint256 index = (block.timestamp - l.start) / l.period;
        spent = index == l.spentPeriod ? l.spent : 0;
        available = spent >= l.amountPerPeriod ? 0 : l.amountPerPeriod - spent;
        return (l.amountPerPeriod, l.period, l.start + index * l.period, spent, available);
    }

    /// @notice A token's refund budget, and how much of it can be refunded right now.
    function refundBudget(address token) external view returns (uint256 limit, uint256 period, uint256 available) {
        Budget storage b = _refundBudgets[token];
        return (b.limit, b.period, _available(b));
    }

    /// @notice A token's pull budget, and how much of it can be pulled right now.
    function pullBudget(address token) external view returns (uint256 limit, uint256 period, uint256 available) {
        Budget storage b = _pullBudgets[token];
        return (b.limit, b.period, _available(b));
    }

    // -------------------------------------------------------------- internal

    function _pull(bytes32 orderId, address payer, address token, uint256 amount) private returns (uint256 left) {
        if (amount == 0) revert ZeroAmount();
        if (!isAcceptedToken[token]) revert TokenNotAccepted(token);
        if (_orders[orderId].payer != address(0)) revert OrderExists(orderId);
        uint256 available = spendingAllowance[payer][token];
        if (amount > available) revert SpendingAllowanceExceeded(payer, token, amount, available);

        unchecked {
            left = available - amount;
        }
        _spendPeriod(payer, token, amount);
        _spendPullBudget(token, amount);
        spendingAllowance[payer][token] = left;
        _orders[orderId] = Order({
            payer: payer, paid: SafeCast.toUint96(amount), token: token, refunded: false, pulledAt: uint64(block.number)
        });
        emit Pulled(orderId, payer, token, amount, left);
        IERC20(token).safeTransferFrom(payer, address(this), amount);
    }

    /// @dev Counts a pull against the payer's periodic limit, if it has one, moving the tally
    ///      to the current period first.
    function _spendPeriod(address payer, address token, uint256 amount) private {
        SpendingLimit storage l = _spendingLimits[payer][token];
        uint256 period = l.period;
        if (period == 0) return;
        uint256 index = (block.timestamp - l.start) / period;
        uint256 spent = l.spent;
        if (index != l.spentPeriod) {
            spent = 0;
            l.spentPeriod = uint40(index);
            l.spentSinceBlock = uint64(block.number);
        }
        uint256 periodStart = l.start + index * period;
        uint256 available = spent >= l.amountPerPeriod ? 0 : l.amountPerPeriod - spent;
        if (amount > available) revert SpendingLimitExceeded(payer, token, amount, available, periodStart + period);
        l.spent = uint128(spent + amount);
        emit SpendingLimitUsed(payer, token, periodStart, spent + amount);
    }

    /// @dev A refunded pull gives back what it used of its period, if that period is still the
    ///      current one and the pull is in its tally (not made before the limit was set).
    function _restoreSpendingLimit(address payer, address token, uint64 pulledAt, uint256 amount) private {
        SpendingLimit storage l = _spendingLimits[payer][token];
        uint256 period = l.period;
        if (period == 0 || pulledAt < l.spentSinceBlock) return;
        uint256 index = (block.timestamp - l.start) / period;
        if (index != l.spentPeriod) return;
        uint256 spent = l.spent > amount ? l.spent - amount : 0;
        l.spent = uint128(spent);
        emit SpendingLimitUsed(payer, token, l.start + index * period, spent);
    }

    /// @dev A budget never set holds nothing; set, it starts full, and a new limit keeps what
    ///      is available now, capped at the limit.
    function _setBudget(Budget storage b, uint256 limit, uint256 period) private {
        uint96 newLimit = SafeCast.toUint96(limit);
        uint256 available = b.period == 0 ? newLimit : Math.min(_available(b), newLimit);
        b.limit = newLimit;
        b.period = uint32(period);
        b.available = uint96(available);
        b.updatedAt = uint32(block.timestamp);
    }

    function _available(Budget storage b) private view returns (uint256) {
        if (b.period == 0) return 0;
        uint256 refill = (block.timestamp - b.updatedAt) * b.limit / b.period;
        return Math.min(uint256(b.available) + refill, b.limit);
    }

    /// @dev Takes `amount` from the bucket, or answers what it holds (taking nothing) when it cannot.
    function _take(Budget storage b, uint256 amount) private returns (bool taken, uint256 available) {
        available = _available(b);
        if (amount > available) return (false, available);
        b.available = uint96(available - amount);
        b.updatedAt = uint32(block.timestamp);
        return (true, available);
    }

    function _spendRefundBudget(address token, uint256 amount) private {
        (bool taken, uint256 available) = _take(_refundBudgets[token], amount);
        if (!taken) revert RefundBudgetExceeded(token, amount, available);
    }

    function _spendPullBudget(address token, uint256 amount) private {
        (bool taken, uint256 available) = _take(_pullBudgets[token], amount);
        if (!taken) revert PullBudgetExceeded(token, amount, available);
    }

    function _setTokenAccepted(address token, bool accepted) private {
        if (token == address(0)) revert ZeroAddress();
        isAcceptedToken[token] = accepted;
        emit TokenAcceptanceSet(token, accepted);
    }

    function _requireSignedAndUsed(address token, Authorization calldata auth) private view {
        bytes32 domainSeparator;
        bool used;
        try IEIP3009(token).DOMAIN_SEPARATOR() returns (bytes32 separator) {
            domainSeparator = separator;
        } catch {
            revert NotAnAuthorizationToken(token);
        }
        try IEIP3009(token).authorizationState(auth.from, auth.nonce) returns (bool state) {
            used = state;
        } catch {
            revert NotAnAuthorizationToken(token);
        }
        bytes32 structHash = keccak256(
            abi.encode(
                TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
                auth.from,
                auth.to,
                auth.value,
                auth.validAfter,
                auth.validBefore,
                auth.nonce
            )
        );
        bytes32 digest = MessageHashUtils.toTypedDataHash(domainSeparator, structHash);
        if (!SignatureChecker.isValidSignatureNow(auth.from, digest, auth.signature)) {
            revert InvalidAuthorizationSignature();
        }
        if (!used) revert AuthorizationNotUsed(token, auth.from, auth.nonce);
    }

    /// @dev `p` is signed by its owner to the x402 exact proxy under Permit2's domain, and its
    ///      nonce is used in Permit2. Reverts Permit2Missing where no Permit2 is deployed.
    function _requirePermit2SignedAndUsed(Permit2Payment calldata p) private view {
        if (PERMIT2.code.length == 0) revert Permit2Missing();
        bytes32 domainSeparator;
        uint256 bitmap;
        try ISignatureTransfer(PERMIT2).DOMAIN_SEPARATOR() returns (bytes32 separator) {
            domainSeparator = separator;
        } catch {
            revert Permit2Missing();
        }
        try ISignatureTransfer(PERMIT2).nonceBitmap(p.owner, p.nonce >> 8) returns (uint256 word) {
            bitmap = word;
        } catch {
            revert Permit2Missing();
        }
        bytes32 structHash = keccak256(
            abi.encode(
                PERMIT_WITNESS_TRANSFER_FROM_TYPEHASH,
                keccak256(abi.encode(TOKEN_PERMISSIONS_TYPEHASH, p.token, p.amount)),
                X402_EXACT_PERMIT2_PROXY,
                p.nonce,
                p.deadline,
                keccak256(abi.encode(PERMIT2_WITNESS_TYPEHASH, p.to, p.validAfter))
            )
        );
        bytes32 digest = MessageHashUtils.toTypedDataHash(domainSeparator, structHash);
        if (!SignatureChecker.isValidSignatureNow(p.owner, digest, p.signature)) revert InvalidPermit2Signature();
        if ((bitmap >> (p.nonce & 0xff)) & 1 == 0) revert Permit2NonceNotUsed(p.owner, p.nonce);
    }
}
